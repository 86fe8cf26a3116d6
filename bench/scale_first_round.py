"""Benchmark: torch's first rendezvous round with many simulated nodes, against one store.

What is real: a torch ``TCPStore`` server in its own process on loopback (as on the rendezvous
host), and per simulated node torch's own ``DynamicRendezvousHandler`` with the ``c10d`` backend
(``C10dRendezvousBackend``), its own TCPStore client and ``next_rendezvous()`` as the agent calls
it, with ``--nnodes=N`` (min = max = N). What is simulated: the nodes are threads, spread over a
few client processes (``--processes``), all on this machine's cores, with no workers; each
node's address is loopback (``local_addr``; torch's node id adds the pid and a counter), so no
name is looked up; on torch 1.13, whose handler takes no ``local_addr``, it is the FQDN torch
looks up once per process. Each size runs twice, one after the other: plain torch, and torch
with the two patches of this checkout that act in this round, ``backoff`` and ``rank_order``,
installed with the parameters the plan gives them (``--modes``). torchrun_jsc's job watch is
not in this round: the agent starts it after the rendezvous.

Every rendezvous state operation goes through a counter in front of the backend's store: the
``compare_set`` tries (each an attempt to write the state blob), those that won (the state read
back is the one written), the ``get`` reads, and the state blob's size. A node that has no rank
within torch's join timeout (``--join-timeout``, the bench's bound) is counted as not ranked. Times
count from one start signal (a store key every node waits for) until each node has its rank. Wall
time on two shared cores overstates what N real nodes see; the operation counts do not depend on
the machine.

``--state-cost`` measures instead, in this process, what one write of the state costs a node
for N participants up to 4,096 (pickling the state, base64 as the c10d backend sends it, and
unpickling the answer): the part of a try that the store serialises, from which the table
projects the shortest first round (N writes one after the other) and the most keep-alives the
state can take per second; again with a heartbeat of its own per node, as a real state has
them (the formed round's builder stamps one moment for all, which pickle writes once).

It runs in a network namespace of its own (``unshare -n``, loopback up), like heartbeat_load.py.
Needs root. Prints; ``--record`` writes the table into docs/benchmarks.md (section
scale-first-round, or scale-state-cost) and the plot to docs/scale-first-round.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from loopback import (  # noqa: E402
    isolate,
    loopback_addr,
    raise_open_files,
    start_clients,
    start_server,
)
from record import read_rows, record  # noqa: E402

#: The round's key prefix (the run id).
RUN_ID = "bench"
PLOT = ROOT / "docs" / "scale-first-round.png"
#: The modes: plain torch, and torch with the patches torchrun_jsc installs for this round.
MODES = ("torch", "torchrun_jsc")


class Counted:
    """The backend's store with its rendezvous-state operations counted; ``moved`` is the bytes
    of state sent and received (a compare_set sends the expected blob and the new one)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.tries = 0
        self.won = 0
        self.gets = 0
        self.blob = 0
        self.moved = 0

    def reset(self) -> None:
        """The counts from zero (after the backend's constructor, which writes its sentinel)."""
        with self.lock:
            self.tries = self.won = self.gets = self.blob = self.moved = 0

    def compare_set(self, key: str, expected: Any, desired: Any) -> Any:
        found = self.store.compare_set(key, expected, desired)
        wanted = desired.encode() if isinstance(desired, str) else desired
        with self.lock:
            self.tries += 1
            self.won += int(found == wanted)
            self.blob = max(self.blob, len(found))
            self.moved += len(expected) + len(wanted) + len(found)
        return found

    def get(self, key: str) -> Any:
        found = self.store.get(key)
        with self.lock:
            self.gets += 1
            self.blob = max(self.blob, len(found))
            self.moved += len(found)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def counts(counters: Sequence[Counted]) -> Dict[str, int]:
    """One client process's counts, as it reports them: the sums, and the largest blob."""
    return {
        "tries": sum(c.tries for c in counters),
        "won": sum(c.won for c in counters),
        "gets": sum(c.gets for c in counters),
        "blob": max((c.blob for c in counters), default=0),
        "moved": sum(c.moved for c in counters),
    }


def gathered(
    children: Sequence[Any], timeout: float
) -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    """Every client process's nodes and counts (its last line: ``{"nodes": [...], **counts}``),
    waited for at most ``timeout`` seconds each; the counts summed, the largest blob kept."""
    found: List[Dict[str, Any]] = []
    total = dict.fromkeys(("tries", "won", "gets", "blob", "moved"), 0)
    for child in children:
        out, _ = child.communicate(timeout=timeout)
        report = json.loads(out.strip().splitlines()[-1])
        found += report.pop("nodes")
        for key, value in report.items():
            total[key] = max(total[key], value) if key == "blob" else total[key] + value
    return found, total


def round_figures(found: List[Dict[str, Any]], size: int, total: Dict[str, int]) -> Dict[str, Any]:
    """A round's figures: the time until its ``size`` nodes all had a rank (None when some had
    none), the median node's, and the state operations, per node of the round too."""
    ranked = [r for r in found if r["rank"] is not None]
    times = sorted(r["s"] for r in ranked) or [math.nan]
    tries, won, gets = total["tries"], total["won"], total["gets"]
    return {
        "ranked": len(ranked),
        "all_ranked_s": round(times[-1], 2) if len(ranked) == size else None,
        "median_s": round(statistics.median(times), 2),
        "compare_set_tries": tries,
        "compare_set_won": won,
        "retries_per_node": round((tries - won) / size, 1),
        "gets": gets,
        "ops_per_node": round((tries + gets) / size, 1),
        "state_bytes": total["blob"],
        "moved_mb": round(total["moved"] / 1e6, 1),
    }


def install_patches(first: int) -> None:
    """This checkout's ``backoff`` and ``rank_order`` patches, with the plan's parameters for a
    node of this round (the node rank: the first simulated node's of this process; torch counts
    the handlers of one process in the low bits of ``local_id``)."""
    sys.path.insert(0, str(ROOT / "src"))
    from torchrun_jsc.patches import backoff, install, params
    from torchrun_jsc.torch_defaults import KEEP_ALIVE_INTERVAL

    chosen = params.Backoff(first=backoff.FIRST, cap=backoff.cap_for(KEEP_ALIVE_INTERVAL))
    for patch in (chosen, params.RankOrder(node_rank=first)):
        declined = install(patch)
        assert declined is None, declined


def agents(port: int, first: int, count: int, nodes: int, join: float, mode: str) -> None:
    """Simulated nodes ``first .. first+count-1``, one thread each: connect, wait for the
    start, join the round; prints one JSON line with each node's time and rank and the counts.
    ``mode`` torchrun_jsc: its patches for this round installed first."""

    if mode == "torchrun_jsc":
        install_patches(first)

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
    addr = loopback_addr(DynamicRendezvousHandler.from_backend)

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
            **addr,  # torch adds the pid and a counter
            timeout=RendezvousTimeout(join=wait, close=wait),
        )
        counted.reset()  # not the backend constructor's sentinel write
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
    print(json.dumps({"nodes": results, **counts(counters)}), flush=True)
    os._exit(0)


def run(nodes: int, processes: int, join: float, mode: str) -> Dict[str, Any]:
    """One first round of ``nodes`` simulated nodes; its figures."""

    import psutil
    import torch.distributed as dist

    server, port = start_server(1800, timeout=900)
    me = str(Path(__file__).resolve())
    children = start_clients(me, "--agents", port, nodes, processes, nodes, join, mode)
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    proc = psutil.Process(server.pid)
    cpu0 = proc.cpu_times()
    start = time.time()
    control.set("bench/go", repr(start))
    found, total = gathered(children, 1800)
    cpu1 = proc.cpu_times()
    server.kill()
    server.wait()
    ranks = sorted(r["rank"] for r in found if r["rank"] is not None)
    assert len(found) == nodes and ranks in ([], list(range(nodes)))
    return {
        "torch": torch_release(),
        "mode": mode,
        "nodes": nodes,
        **round_figures(found, nodes, total),
        "server_cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 2),
    }


def torch_release() -> str:
    import torch

    return str(torch.__version__).split("+")[0]


def torch_now() -> datetime.datetime:
    """Now, as torch's rendezvous stamps heartbeats: aware UTC from torch 2.6, naive UTC before
    (torch compares them with its own clock, and the two kinds do not compare)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    aware = datetime.datetime.now(datetime.timezone.utc)
    return aware if hasattr(dr, "timezone") else aware.replace(tzinfo=None)


def described(node: Any) -> List[Any]:
    """A torch node description as (address, pid, local id), the order ``_NodeDesc`` takes
    them in (the address is ``addr`` from torch 2.0, ``fqdn`` before)."""
    addr = node.addr if hasattr(node, "addr") else node.fqdn
    return [addr, node.pid, node.local_id]


def made_up_nodes(count: int) -> List[Tuple[str, int, int]]:
    """``count`` distinct node descriptions (address, pid, local id), as torch's have them."""
    return [(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", 4000 + i, 1 << 16) for i in range(count)]


def round_state(nodes: Sequence[Sequence[Any]]) -> Any:
    """torch's rendezvous state after a complete first round of these nodes (address, pid,
    local id; ranks in this order), every heartbeat stamped now."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    state = dr._RendezvousState()
    state.round = 1
    state.complete = True
    now = torch_now()
    for rank, (addr, pid, local_id) in enumerate(nodes):
        node = dr._NodeDesc(addr, pid, local_id)
        state.participants[node] = rank
        state.last_heartbeats[node] = now
    return state


def every(row: Dict[str, Any]) -> bool:
    """Every row is a point of the fits."""
    return True


def formed(row: Dict[str, Any]) -> bool:
    """Whether the row's round formed (a round that never did is no point of a fit)."""
    return row["all_ranked_s"] is not None


def exponent(
    rows: List[Dict[str, Any]], key: str, counts: Callable[[Dict[str, Any]], bool] = formed
) -> float:
    """The least-squares slope of log(``key``) over log(nodes), over the rows that ``counts``
    (by default the rounds that formed): how the figure grows with N."""
    points = [(math.log(r["nodes"]), math.log(r[key])) for r in rows if r[key] and counts(r)]
    if len(points) < 2:
        return float("nan")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    num = sum((x - mx) * (y - my) for x, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return num / den if den else float("nan")


COLUMNS = [
    ("mode", "mode"),
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
    ("moved_mb", "state moved (MB)"),
    ("server_cpu_s", "store CPU (s)"),
]


def state_cost(sizes: List[int], repeat: int) -> Dict[str, Any]:
    """What one try costs a node for each size: the rendezvous state with N participants (each
    with its heartbeat, as after a round) pickled and base64-encoded as the c10d backend sends
    it, and the answer decoded and unpickled; the median of ``repeat``; from it the shortest
    first round (N such writes one after the other) and the most keep-alives per second. Twice:
    with every heartbeat the one moment :func:`round_state` stamps (pickle then writes it once),
    and with a moment of its own per node, as the nodes' keep-alives leave a real state."""
    import base64
    import pickle

    from torchrun_jsc.torch_defaults import KEEP_ALIVE_INTERVAL

    def one_try(state: Any) -> Tuple[int, float]:
        blob = base64.b64encode(pickle.dumps(state))
        took = []
        for _ in range(repeat):
            start = time.perf_counter()
            pickle.loads(base64.b64decode(base64.b64encode(pickle.dumps(state))))
            took.append(time.perf_counter() - start)
        return len(blob), statistics.median(took)

    rows = []
    for n in sizes:
        state = round_state(made_up_nodes(n))
        size, try_s = one_try(state)
        for k, node in enumerate(state.last_heartbeats):  # each its own moment
            state.last_heartbeats[node] -= datetime.timedelta(microseconds=k + 1)
        own_size, own_s = one_try(state)
        rows.append(
            {
                "nodes": n,
                "blob_kb": round(size / 1e3, 1),
                "try_ms": round(try_s * 1e3, 2),
                "serial_round_s": round(n * try_s, 1),
                "keep_alives_per_s": round(n / KEEP_ALIVE_INTERVAL),
                "writes_per_s": round(1 / try_s),
                "own_blob_kb": round(own_size / 1e3, 1),
                "own_try_ms": round(own_s * 1e3, 2),
                "own_writes_per_s": round(1 / own_s),
            }
        )
    return {"rows": rows, "interval": KEEP_ALIVE_INTERVAL}


COST_COLUMNS = [
    ("nodes", "nodes"),
    ("blob_kb", "state blob (kB, base64)"),
    ("try_ms", "one try, one core (ms)"),
    ("serial_round_s", "N tries in a row (s)"),
    ("keep_alives_per_s", "keep-alives needed (/s)"),
    ("writes_per_s", "writes one after the other (/s)"),
    ("own_blob_kb", "a heartbeat per node: blob (kB)"),
    ("own_try_ms", "one try (ms)"),
    ("own_writes_per_s", "writes one after the other (/s)"),
]


#: The release table: the round's main figures, per release (titles as in :data:`COLUMNS`).
_RELEASE_KEYS = (
    "mode",
    "nodes",
    "ranked",
    "all_ranked_s",
    "compare_set_tries",
    "retries_per_node",
    "moved_mb",
)
RELEASE_COLUMNS = [("torch", "torch")] + [c for c in COLUMNS if c[0] in _RELEASE_KEYS]


def table(rows: List[Dict[str, Any]], columns: List[Any]) -> List[str]:
    return [
        "| " + " | ".join(title for _, title in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(str(r[k]) for k, _ in columns) + " |" for r in rows),
    ]


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    """Tries per node, state bytes moved per node and the time to every rank, against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels: List[Tuple[Callable[[Dict[str, Any]], float], str, str]] = [
        (lambda r: float(r["compare_set_tries"]) / r["nodes"], "compare_set tries per node", ""),
        (lambda r: float(r["moved_mb"]) * 1e3 / r["nodes"], "state moved per node", "kB"),
        (lambda r: float(r["all_ranked_s"]), "first round: every rank", "s"),
    ]
    for ax, (value, title, unit) in zip(axes, panels):
        for mode, marker in zip(MODES, "os"):
            mine = [r for r in rows if r["mode"] == mode and r["all_ranked_s"] is not None]
            ax.plot([r["nodes"] for r in mine], [value(r) for r in mine], marker + "-", label=mode)
        sizes = sorted({r["nodes"] for r in rows})
        ax.set(title=title, xlabel="simulated nodes", ylabel=unit, yscale="log")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--agents":
        port, first, count, nodes = (int(x) for x in sys.argv[2:6])
        agents(port, first, count, nodes, float(sys.argv[6]), sys.argv[7])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument(
        "--join-timeout", type=float, default=300.0, help="torch's join timeout (s): the bound"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--state-cost", action="store_true", help="one try's cost per N instead (no store)"
    )
    parser.add_argument("--plot", type=Path, help="write the plot here (matplotlib)")
    parser.add_argument(
        "--releases",
        type=Path,
        nargs="+",
        help="instead: one table of the JSON rows these files hold (runs on several releases)",
    )
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    if args.releases:
        lines = table(read_rows(args.releases), RELEASE_COLUMNS)
        print("\n".join(lines))
        if args.record:
            section = "\n".join(lines) + "\n"
            record("scale-first-round-releases", section, ROOT / "docs" / "benchmarks.md")
        return
    if args.state_cost:
        sys.path.insert(0, str(ROOT / "src"))
        cost = state_cost(args.nodes, repeat=21)
        lines = table(cost["rows"], COST_COLUMNS)
        note = (
            f"\ntorch {torch_release()}; median of 21 tries per size; one"
            f" keep-alive per node every {cost['interval']} s.\n"
        )
        print("\n".join(lines) + note)
        if args.record:
            record(
                "scale-state-cost", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md"
            )
        return
    isolate("scale_first_round.py")
    rows = []
    for n in args.nodes:
        for mode in args.modes:  # paired: both modes at one size, one after the other
            row = run(n, args.processes, args.join_timeout, mode)
            print(json.dumps(row), flush=True)
            rows.append(row)
    growth = "; ".join(
        f"{mode}: "
        + ", ".join(
            f"{title} ~ N^{exponent([r for r in rows if r['mode'] == mode], key):.2f}"
            for key, title in COLUMNS
            if key in ("all_ranked_s", "compare_set_tries", "moved_mb")
        )
        for mode in args.modes
    )
    note = (
        f"\ntorch {torch_release()}, {args.processes} client processes."
        f" Growth with N (least-squares fit over these rows): {growth}.\n"
    )
    lines = table(rows, COLUMNS)
    print("\n".join(lines) + note)
    if args.plot or args.record:
        plot(rows, args.plot or PLOT)
    if args.record:
        record("scale-first-round", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
