"""Benchmark: planning and address discovery when the DNS server does not answer.

In a one-node namespace cluster, the node's resolv.conf points at an address on the IB subnet
that nobody holds (queries die in ARP, i.e. time out), then at the normal refusing loopback.
Measured inside the node: torchrun_jsc's fact gathering + plan for an endpoint in /etc/hosts
and for an address literal, and, for comparison, ``socket.getfqdn()`` (what torch uses for
addresses by default). Needs root. Prints; with --record writes docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.cluster.harness import Cluster, free_prefix  # noqa: E402

from record import record  # noqa: E402

PROBE = r"""
import json, socket, statistics, sys, time
import torch
from torchrun_jsc import facts
from torchrun_jsc.plan import make_plan
from torchrun_jsc.request import read_request
out = {}
for label, endpoint in (("name in /etc/hosts", "node0i:29500"), ("address", "10.78.0.10:29500")):
    argv = ["--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", "train.py"]
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        request = read_request(argv, {})
        node = facts.gather(request.lookup_host, 5.0)
        make_plan(request, str(torch.__version__), node)
        times.append(time.perf_counter() - t0)
    out[label] = statistics.median(times)
t0 = time.perf_counter()
socket.getfqdn()
out["socket.getfqdn() (torch's default)"] = time.perf_counter() - t0
t0 = time.perf_counter()
try:
    socket.getaddrinfo("not-in-hosts.example", None)
except OSError:
    pass
out["a name not in /etc/hosts (DNS check)"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    figures = {}
    with Cluster(nodes=1, prefix=free_prefix("trjd"), python=Path(sys.executable)) as c:
        resolv = Path(f"/etc/netns/{c.node_ns(0)}/resolv.conf")
        original = resolv.read_text()
        for label, text in (
            ("DNS server answers 'refused' at once", original),
            ("DNS server dead (queries time out)", "nameserver 10.78.0.250\n"),
        ):
            resolv.write_text(text)
            p = c.node_exec(0, [str(c.python), "-c", PROBE])
            out, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise SystemExit(err)
            figures[label] = json.loads(out.strip().splitlines()[-1])
        resolv.write_text(original)
    rows = [
        "| DNS | " + " | ".join(f"{k} (ms)" for k in next(iter(figures.values()))) + " |",
        "|---|" + "---|" * len(next(iter(figures.values()))),
    ]
    for label, values in figures.items():
        rows.append(f"| {label} | " + " | ".join(f"{v * 1000:.1f}" for v in values.values()) + " |")
    table = "\n".join(rows) + (
        "\n\nPlanning = fact gathering (interfaces, resolving, route "
        "lookup, locality) + plan, median of 5, one node namespace."
    )
    print(table)
    if args.record:
        record("dead-dns", table, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
