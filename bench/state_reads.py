"""Benchmark: torch's rendezvous state reads in steady state, against what one store serves.

While its workers run, every torch agent's monitor loop asks its rendezvous handler every
monitor interval (torchrun's default: 0.1 s from torch 2.4, 5 s before) how many nodes wait
(``num_nodes_waiting``), and the handler reads the whole state blob whenever its copy is older
than its cache (1 s): N agents read N blobs a second (a fifth of that before 2.4), and the blob
grows with N, so the bytes a second grow as N². The simulations on this
machine cannot run that (every simulated node would also decode a blob a second on the same two
cores), so this bench measures the server's side and projects.

What is real: torch's TCPStore server in its own process on loopback, the blob (torch's own
rendezvous state with N participants, each with its heartbeat, stored by torch's c10d backend
under its key), and torch's TCPStore clients reading it with ``get`` in a loop, threads over a
few processes, enough to keep the server busy. What is projected: the reads N real agents ask
for (one per agent and read interval) and the server's CPU they need, from the server's
measured CPU per read.

Columns: the blob's size, the reads and bytes asked per second, the reads served per second
here (the clients share the two cores with the server: a lower bound), the server's CPU time
per read, and the share of one core the asked reads need at that cost. The server answers from
one thread: above 100 % it cannot keep up on any network. Runs in a network namespace of its
own (``unshare -n``, loopback up). Needs root. Prints; ``--record`` writes the table into
docs/benchmarks.md (section scale-state-reads) and the plot to docs/scale-state-reads.png.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from loopback import isolate, raise_open_files, start_clients, start_server  # noqa: E402
from record import record  # noqa: E402
from scale_first_round import (  # noqa: E402
    RUN_ID,
    every,
    exponent,
    made_up_nodes,
    round_state,
    table,
    torch_release,
)

#: torch's state cache in the rendezvous handler (s), the same on every release.
CACHE_DURATION = 1.0
PLOT = ROOT / "docs" / "scale-state-reads.png"


def monitor_interval() -> float:
    """torchrun's default ``--monitor-interval`` on this torch (0.1 s from 2.4, 5 s before)."""
    from torch.distributed.run import get_args_parser

    return float(get_args_parser().get_default("monitor_interval"))


def read_every() -> float:
    """How often each agent reads the whole state: its monitor loop's interval, or the cache's
    lifetime when the loop asks more often."""
    return max(CACHE_DURATION, monitor_interval())


def readers(port: int, first: int, count: int, seconds: float, key: str) -> None:
    """A client process: ``count`` threads, each with its own store client, reading ``key`` for
    ``seconds`` once ``bench/go`` is set; prints the reads and bytes as one JSON line."""
    import torch.distributed as dist

    raise_open_files()
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    wait = datetime.timedelta(seconds=120)
    stores = [tcp_store("127.0.0.1", port, is_master=False, timeout=wait) for _ in range(count)]
    totals = {"reads": 0, "bytes": 0}
    lock = threading.Lock()

    def read(store: Any) -> None:
        reads = size = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            size += len(store.get(key))
            reads += 1
        with lock:
            totals["reads"] += reads
            totals["bytes"] += size

    print("ready", flush=True)
    stores[0].wait(["bench/go"])
    threads = [threading.Thread(target=read, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(totals), flush=True)


def run(nodes: int, processes: int, threads: int, seconds: float) -> Dict[str, Any]:
    """One size: the blob stored, ``processes`` times ``threads`` readers for ``seconds``."""
    import psutil
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    server, port = start_server(seconds + 300, timeout=120)
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    backend = C10dRendezvousBackend(control, RUN_ID)
    state = pickle.dumps(round_state(made_up_nodes(nodes)))
    assert backend.set_state(state) is not None
    key = backend._key
    stored = len(base64.b64encode(state))
    me = str(Path(__file__).resolve())
    children = start_clients(me, "--read", port, processes * threads, processes, seconds, key)
    server_proc = psutil.Process(server.pid)
    cpu0 = sum(server_proc.cpu_times()[:2])
    t0 = time.monotonic()
    control.set("bench/go", "1")
    totals = {"reads": 0, "bytes": 0}
    for child in children:
        out, _ = child.communicate(timeout=seconds + 120)
        for name, value in json.loads(out.strip().splitlines()[-1]).items():
            totals[name] += value
    span = time.monotonic() - t0
    cpu = sum(server_proc.cpu_times()[:2]) - cpu0
    server.kill()
    server.wait()
    asked = nodes / read_every()
    per_read = cpu / max(totals["reads"], 1)
    return {
        "torch": torch_release(),
        "nodes": nodes,
        "blob_kb": round(stored / 1e3, 1),
        "asked_per_s": round(asked),
        "asked_mb_per_s": round(asked * stored / 1e6, 1),
        "served_per_s": round(totals["reads"] / span),
        "served_mb_per_s": round(totals["bytes"] / span / 1e6, 1),
        "server_us_per_read": round(per_read * 1e6, 1),
        "needed_cpu_percent": round(100 * asked * per_read, 1),
    }


COLUMNS = [
    ("nodes", "nodes"),
    ("blob_kb", "state blob (kB)"),
    ("asked_per_s", "reads asked (/s)"),
    ("asked_mb_per_s", "asked (MB/s)"),
    ("served_per_s", "reads served here (/s)"),
    ("served_mb_per_s", "served here (MB/s)"),
    ("server_us_per_read", "server CPU per read (µs)"),
    ("needed_cpu_percent", "server CPU asked (% of a core)"),
]


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    """The bytes asked a second and the server's CPU they need, against N (log scales)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["nodes"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.plot(sizes, [r["asked_mb_per_s"] for r in rows], "o-", label="asked by N agents")
    left.set(title="state reads: bytes a second", ylabel="MB/s", yscale="log")
    right.plot(sizes, [r["needed_cpu_percent"] for r in rows], "o-", label="asked by N agents")
    right.axhline(100, color="grey", linestyle="--", label="the server's one thread")
    right.set(title="state reads: the store server's CPU", ylabel="% of a core", yscale="log")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("nodes")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--read":
        port, first, count = (int(x) for x in sys.argv[2:5])
        readers(port, first, count, float(sys.argv[5]), sys.argv[6])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024, 2048, 4096, 6144])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4, help="readers per process")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    isolate("state_reads.py")
    rows: List[Dict[str, Any]] = []
    for n in args.nodes:
        row = run(n, args.processes, args.threads, args.seconds)
        print(json.dumps(row), flush=True)
        rows.append(row)
    growth = ", ".join(
        f"{title} ~ N^{exponent(rows, key, every):.2f}"
        for key, title in COLUMNS
        if key in ("asked_mb_per_s", "server_us_per_read", "needed_cpu_percent")
    )
    note = (
        f"\ntorch {torch_release()}, {args.processes * args.threads} readers in"
        f" {args.processes} processes, {args.seconds:g} s per size; asked: one read per agent"
        f" every {read_every():g} s (its monitor loop asks every {monitor_interval():g} s, torch's"
        f" state cache lives {CACHE_DURATION:g} s). Growth with N (least-squares fit"
        f" over these rows): {growth}.\n"
    )
    lines = table(rows, COLUMNS)
    print("\n".join(lines) + note)
    if args.record:
        plot(rows, PLOT)
        record("scale-state-reads", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
