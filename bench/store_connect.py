"""Benchmark: many store clients connecting to a fresh TCPStore at once, as after a handover.

After a lost rendezvous host every other node starts its agent again and connects to the next
host's new store at about the same moment (torchrun_jsc's failover); at a job's start the nodes
connect to the first host's store the same way. What is real: torch's ``TCPStore`` server in its
own process on loopback, as the rendezvous host runs it (its default backend for the release:
libuv from torch 2.4), and torch's ``TCPStore`` client, one per simulated node, each followed by
one ``get`` of a key the bench set (the client's first answer). What is simulated: the nodes are
threads over several client processes (``--processes``), released together by one line on
their standard input, which carries the moment of the release; the time counts from it until
each client has its answer, and every client stays connected until the end (a real agent opens
two: torch's and the job watch's; here each node has one). A
client that has none within ``--timeout`` counts as failed, and so does every client of a
client process that died (counted too).

Runs in a network namespace of its own (``unshare -n``, loopback up). Needs root. Prints;
``--record`` writes the table into docs/benchmarks.md (section store-connect) and the plot to
docs/store-connect.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from loopback import isolate, raise_open_files, start_server  # noqa: E402
from record import read_rows, record  # noqa: E402
from scale_first_round import table, torch_release  # noqa: E402

PLOT = ROOT / "docs" / "store-connect.png"


def clients(port: int, count: int, timeout: float) -> None:
    """``count`` clients, one thread each: once standard input gives the release's moment
    (``time.time()`` in the parent) each connects and reads ``bench/key``; prints the seconds
    from the release until each had its answer (None: no answer). Every client stays connected
    until the process ends, as an agent's does."""
    import torch.distributed as dist

    raise_open_files()
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    wait = datetime.timedelta(seconds=timeout)
    release = threading.Event()
    took: List[Any] = []
    held: List[Any] = []  # the connections stay open
    lock = threading.Lock()
    start = [0.0]

    def client() -> None:
        release.wait()
        try:
            store = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
            store.get("bench/key")
            seconds: Any = time.time() - start[0]
        except Exception:  # no answer within the timeout
            store, seconds = None, None
        with lock:
            took.append(seconds)
            held.append(store)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    start[0] = float(sys.stdin.readline())
    release.set()
    for thread in threads:
        thread.join()
    print(json.dumps(took), flush=True)
    os._exit(0)  # the held connections end with the process


def run(nodes: int, processes: int, timeout: float) -> Dict[str, Any]:
    """``nodes`` clients connecting at once to a fresh store; the times until each had its
    first answer."""
    import psutil
    import torch.distributed as dist

    server, port = start_server(timeout + 600, timeout=timeout)
    children: List[subprocess.Popen[str]] = []
    try:
        tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
        control = tcp_store(
            "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60)
        )
        control.set("bench/key", "1")
        per = -(-nodes // processes)
        me = str(Path(__file__).resolve())
        counts = [min(per, nodes - first) for first in range(0, nodes, per)]
        for count in counts:
            argv = [sys.executable, me, "--clients", str(port), str(count), str(timeout)]
            children.append(
                subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )
        for child in children:
            assert child.stdout is not None
            said = child.stdout.readline().strip()
            assert said == "ready", said
        served = psutil.Process(server.pid)
        cpu0 = served.cpu_times()
        released = repr(time.time())  # one moment for all: each process counts from it
        for child in children:
            assert child.stdin is not None
            child.stdin.write(released + "\n")
            child.stdin.flush()
        took: List[Any] = []
        crashed = 0
        for child, count in zip(children, counts):
            out, _ = child.communicate(timeout=timeout + 120)
            told = [line for line in out.splitlines() if line.startswith("[")]
            if child.returncode != 0 or not told:  # a client process that died: none answered
                crashed += 1
                took += [None] * count
                continue
            took += json.loads(told[-1])
        cpu1 = served.cpu_times()
    finally:
        for proc in (server, *children):
            proc.kill()
            proc.wait()
    answered = sorted(t for t in took if t is not None)
    assert len(took) == nodes
    quantile = statistics.quantiles(answered, n=100) if len(answered) > 1 else answered * 99
    return {
        "torch": torch_release(),
        "nodes": nodes,
        "answered": len(answered),
        "median_s": round(statistics.median(answered), 3) if answered else None,
        "p99_s": round(quantile[98], 3) if answered else None,
        "all_s": round(answered[-1], 3) if len(answered) == nodes else None,
        "server_cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 2),
        "crashed": crashed,
        "timeout": timeout,
    }


COLUMNS = [
    ("torch", "torch"),
    ("nodes", "clients"),
    ("answered", "answered"),
    ("median_s", "median (s)"),
    ("p99_s", "99th percentile (s)"),
    ("all_s", "every client (s)"),
    ("server_cpu_s", "store CPU (s)"),
    ("crashed", "client processes that died"),
]


def release_key(release: str) -> List[int]:
    """A release's numbers (``1.13.0a0`` is 1, 13, 0), to sort by."""
    return [int("".join(c for c in part if c.isdigit()) or 0) for part in release.split(".")]


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    """The median client's time and the slowest's, against N, per release."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (key, title) in zip(
        axes, (("median_s", "median client"), ("p99_s", "99th percentile"))
    ):
        for release in sorted({r["torch"] for r in rows}, key=release_key):
            mine = [r for r in rows if r["torch"] == release and r[key] is not None]
            ax.plot([r["nodes"] for r in mine], [r[key] for r in mine], "o-", label=release)
        sizes = sorted({r["nodes"] for r in rows})
        ax.set(title=f"first answer: {title}", xlabel="clients at once", ylabel="s", yscale="log")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--clients":
        clients(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=120.0, help="each client's (s)")
    parser.add_argument(
        "--rows", type=Path, nargs="+", help="instead of a run: the table of these JSON rows"
    )
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    if args.rows:
        rows = read_rows(args.rows)
    else:
        isolate("store_connect.py")
        rows = []
        for n in args.nodes:
            row = run(n, args.processes, args.timeout)
            row["processes"] = args.processes
            print(json.dumps(row), flush=True)
            rows.append(row)
    processes = ", ".join(sorted({str(r.get("processes", "?")) for r in rows}))
    timeouts = ", ".join(sorted({f"{r.get('timeout', '?')}" for r in rows}))
    note = f"\n{processes} client processes; each client's timeout {timeouts} s.\n"
    lines = table(rows, COLUMNS)
    print("\n".join(lines) + note)
    if args.record:
        plot(rows, PLOT)
        record("store-connect", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
