"""Benchmark: torch's first rendezvous round with many simulated nodes, against one store.

What is real: a torch ``TCPStore`` server in its own process on loopback (as on the rendezvous
host), and per simulated node torch's own ``DynamicRendezvousHandler`` with the ``c10d`` backend
(``C10dRendezvousBackend``), its own TCPStore client and ``next_rendezvous()`` as the agent calls
it, with ``--nnodes=N`` (min = max = N). What is simulated: the nodes are threads, spread over a
few client processes (``--processes``), all on this machine's cores, with no workers; each
node's address is loopback (``local_addr``; torch's node id adds the pid and a counter), so no
name is looked up. torchrun_jsc's own part (the job watch, its store keys) is not in this round:
the agent starts it after the rendezvous.

Every rendezvous state operation goes through a counter in front of the backend's store: the
``compare_set`` tries (each an attempt to write the state blob), those that won (the state read
back is the one written), the ``get`` reads, and the state blob's size. A node that has no rank
within torch's join timeout (``--join-timeout``, the bench's bound) is counted as not ranked. Times
count from one start signal (a store key every node waits for) until each node has its rank. Wall
time on two shared cores overstates what N real nodes see; the operation counts do not depend on
the machine.

It runs in a network namespace of its own (``unshare -n``, loopback up), like heartbeat_load.py.
Needs root. Prints; ``--record`` writes the table into docs/benchmarks.md (section
scale-first-round).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from loopback import isolate, raise_open_files, start_clients, start_server  # noqa: E402
from record import record  # noqa: E402

#: The round's key prefix (the run id).
RUN_ID = "bench"


class Counted:
    """The backend's store with its rendezvous-state operations counted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.tries = 0
        self.won = 0
        self.gets = 0
        self.blob = 0

    def compare_set(self, key: str, expected: Any, desired: Any) -> Any:
        found = self.store.compare_set(key, expected, desired)
        wanted = desired.encode() if isinstance(desired, str) else desired
        with self.lock:
            self.tries += 1
            self.won += int(found == wanted)
            self.blob = max(self.blob, len(found))
        return found

    def get(self, key: str) -> Any:
        found = self.store.get(key)
        with self.lock:
            self.gets += 1
            self.blob = max(self.blob, len(found))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def agents(port: int, first: int, count: int, nodes: int, join: float) -> None:
    """Simulated nodes ``first .. first+count-1``, one thread each: connect, wait for the
    start, join the round; prints one JSON line with each node's time and rank and the counts."""
    import datetime

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    raise_open_files()
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    wait = datetime.timedelta(seconds=join)
    results: List[Dict[str, Any]] = []
    counters: List[Counted] = []
    lock = threading.Lock()
    ready = threading.Barrier(count + 1)

    def node(index: int) -> None:
        store = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
        counted = Counted(store)
        backend = C10dRendezvousBackend(counted, RUN_ID)  # type: ignore[arg-type]
        handler = DynamicRendezvousHandler.from_backend(
            RUN_ID,
            store,
            backend,
            min_nodes=nodes,
            max_nodes=nodes,
            local_addr="127.0.0.1",  # unique all the same: torch adds the pid and a counter
            timeout=RendezvousTimeout(join=wait, close=wait),
        )
        ready.wait()
        start = float(store.get("bench/go"))
        try:
            info: Any = handler.next_rendezvous()
            rank: Any = info.rank if hasattr(info, "rank") else info[1]
        except Exception:  # torch's join timeout: the node never had a rank
            rank = None
        took = time.time() - start
        with lock:
            results.append({"node": index, "s": took, "rank": rank})
            counters.append(counted)
        # torch's keep-alives go on in the background; the process ends after the report

    threads = [threading.Thread(target=node, args=(first + k,), daemon=True) for k in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    print("ready", flush=True)
    for thread in threads:
        thread.join()
    totals = {
        "tries": sum(c.tries for c in counters),
        "won": sum(c.won for c in counters),
        "gets": sum(c.gets for c in counters),
        "blob": max((c.blob for c in counters), default=0),
    }
    print(json.dumps({"nodes": results, **totals}), flush=True)
    os._exit(0)


def run(nodes: int, processes: int, join: float) -> Dict[str, Any]:
    """One first round of ``nodes`` simulated nodes; its figures."""
    import datetime

    import psutil
    import torch.distributed as dist

    server, port = start_server(1800, timeout=900)
    me = str(Path(__file__).resolve())
    children = start_clients(me, "--agents", port, nodes, processes, nodes, join)
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    proc = psutil.Process(server.pid)
    cpu0 = proc.cpu_times()
    start = time.time()
    control.set("bench/go", repr(start))
    found: List[Dict[str, Any]] = []
    tries = won = gets = blob = 0
    for child in children:
        out, _ = child.communicate(timeout=1800)
        report = json.loads(out.strip().splitlines()[-1])
        found += report["nodes"]
        tries, won, gets = tries + report["tries"], won + report["won"], gets + report["gets"]
        blob = max(blob, report["blob"])
    cpu1 = proc.cpu_times()
    server.kill()
    server.wait()
    ranked = [r for r in found if r["rank"] is not None]
    times = sorted(r["s"] for r in ranked) or [math.nan]
    assert len(found) == nodes and sorted(r["rank"] for r in ranked) in ([], list(range(nodes)))
    return {
        "nodes": nodes,
        "ranked": len(ranked),
        "all_ranked_s": round(times[-1], 2) if len(ranked) == nodes else None,
        "median_s": round(statistics.median(times), 2),
        "compare_set_tries": tries,
        "compare_set_won": won,
        "retries_per_node": round((tries - won) / nodes, 1),
        "gets": gets,
        "ops_per_node": round((tries + gets) / nodes, 1),
        "state_bytes": blob,
        "server_cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 2),
    }


def exponent(rows: List[Dict[str, Any]], key: str) -> float:
    """The least-squares slope of log(``key``) over log(nodes): how the figure grows with N."""
    points = [(math.log(r["nodes"]), math.log(r[key])) for r in rows if r[key]]
    if len(points) < 2:
        return float("nan")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    num = sum((x - mx) * (y - my) for x, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return num / den if den else float("nan")


COLUMNS = [
    ("nodes", "nodes"),
    ("ranked", "nodes ranked"),
    ("all_ranked_s", "every rank (s)"),
    ("median_s", "median (s)"),
    ("compare_set_tries", "compare_set tries"),
    ("compare_set_won", "won"),
    ("retries_per_node", "retries per node"),
    ("gets", "gets"),
    ("ops_per_node", "state ops per node"),
    ("state_bytes", "state blob (bytes)"),
    ("server_cpu_s", "store CPU (s)"),
]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--agents":
        port, first, count, nodes = (int(x) for x in sys.argv[2:6])
        agents(port, first, count, nodes, float(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument(
        "--join-timeout", type=float, default=300.0, help="torch's join timeout (s): the bound"
    )
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    isolate("scale_first_round.py")
    import torch

    rows = []
    for n in args.nodes:
        row = run(n, args.processes, args.join_timeout)
        print(json.dumps(row), flush=True)
        rows.append(row)
    lines = [
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(str(r[k]) for k, _ in COLUMNS) + " |" for r in rows),
    ]
    growth = ", ".join(
        f"{title} ~ N^{exponent(rows, key):.2f}"
        for key, title in COLUMNS[1:]
        if key in ("all_ranked_s", "compare_set_tries", "ops_per_node", "state_bytes")
    )
    note = (
        f"\ntorch {torch.__version__.split('+')[0]}, {args.processes} client processes."
        f" Growth with N (least-squares fit over these rows): {growth}.\n"
    )
    print("\n".join(lines) + note)
    if args.record:
        record("scale-first-round", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
