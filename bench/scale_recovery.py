"""Benchmark: torch's next rendezvous round after one lost node, with many simulated nodes.

What is real: a torch ``TCPStore`` server in its own process on loopback (as on the rendezvous
host), and per simulated node torch's own ``DynamicRendezvousHandler`` (c10d backend, its own
TCPStore client) whose ``next_rendezvous()`` runs as an agent's restart calls it: torch's exit
operation (the node leaves the complete round; the round after it starts when the last member
has left) and then its join operation, with torch's keep-alives inside the join and its last
call. What is simulated: the round before and the loss. The bench writes the state that torch's
sanitize leaves once a member's heartbeat is older than its expiry: round 1 complete, the lost
member (the last node rank, not the host) already removed, every other heartbeat stamped at the
writing; then every live member's handler reads it (uncounted) and, at one start signal (a
store key; the job watch's restart reaches the nodes within a beat of each other), calls
``next_rendezvous()``. The lost member's handler does nothing. The heartbeats are a few seconds
old at the signal (every node reads the state first, and the spare joins the wait list: the
row's ``heartbeats_age_s``, which the rows recorded at 14ce106 do not have); torch's own
keep-alive timers do not run before it, as ``next_rendezvous()`` stops them. Each node's store
client waits up to the join timeout for an answer, where torch's c10d backend waits
``read_timeout`` (60 s): a write slower than that would fail a real node and only waits here.
The nodes are threads over several client processes (``--processes``), all on this machine's
cores, with no workers; addresses as in scale_first_round.py.

Two ways on (``--ways``), as the job watch takes them:

* ``spare``: ``--nnodes=N:N`` with one agent more, which waits as a spare; it calls
  ``next_rendezvous()`` once the state is written and is in torch's wait list before the start
  signal. The next round forms with N nodes, full, at once.
* ``shrink``: ``--nnodes=N-1:N``, no spare. The next round has N-1 nodes, its quorum, and torch
  completes it after its last call (``--last-call``, torch's default 30 s) from the moment the
  quorum was reached.

Each way and size runs for plain torch and for torch with the patches of this checkout that
act in this round (``--modes``): ``backoff`` and ``rank_order`` as the plan gives them, and
``spare_wait`` before torch 2.3. ``host_in_round`` is not installed (it needs a job watch's
session): it does no store operation in the round (the host's member key is read once per agent)
and turns a join into torch's own one-second look while the host is missing, which it is not
here. Counted as in scale_first_round.py: compare_set tries and those that won, gets, the
state blob's largest size, the bytes moved; from the start signal until every node of the next
round has its rank (the spare's operations before the signal are counted too, the store's CPU
from the signal). A node without a rank within ``--join-timeout`` is counted as not ranked.

Runs in a network namespace of its own (``unshare -n``, loopback up). Needs root. Prints;
``--record`` writes the table into docs/benchmarks.md (section scale-recovery-round) and the
plot to docs/scale-recovery-round.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from loopback import (  # noqa: E402
    isolate,
    loopback_addr,
    raise_open_files,
    start_clients,
    start_server,
)
from record import read_rows, record  # noqa: E402
from scale_first_round import (  # noqa: E402
    MODES,
    RUN_ID,
    Counted,
    counts,
    described,
    exponent,
    formed,
    gathered,
    install_patches,
    round_figures,
    round_state,
    table,
    torch_release,
)

#: The ways on after the loss.
WAYS = ("spare", "shrink")
PLOT = ROOT / "docs" / "scale-recovery-round.png"
#: Longest wait for the spare to be in torch's wait list before the start signal (s).
SPARE_WAIT = 60.0


def sizes(members: int, way: str) -> Tuple[int, int, int]:
    """The agents, and ``--nnodes``' minimum and maximum, of a job of ``members`` nodes."""
    if way == "spare":
        return members + 1, members, members
    return members, members - 1, members


def before_2_3() -> bool:
    """Whether this torch is older than 2.3 (the plan installs ``spare_wait`` there)."""
    major, minor = (int(x) for x in torch_release().split(".")[:2])
    return (major, minor) < (2, 3)


def agents(
    port: int,
    first: int,
    count: int,
    members: int,
    way: str,
    join: float,
    last_call: float,
    mode: str,
) -> None:
    """Simulated nodes ``first .. first+count-1`` of a job of ``members`` nodes: a handler
    each; prints ``ready``, then the handlers' node descriptions; at ``bench/seeded`` reads the
    state, prints ``synced`` (the spare then joins), and at ``bench/go`` every live member calls
    ``next_rendezvous()``; prints each node's time, rank and round and the counts."""
    if mode == "torchrun_jsc":
        install_patches(first)
        if before_2_3():
            from torchrun_jsc.patches import install, params

            declined = install(params.SpareWait())
            assert declined is None, declined

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    raise_open_files()
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    wait = datetime.timedelta(seconds=join)
    timeout = dr.RendezvousTimeout(
        join=wait, last_call=datetime.timedelta(seconds=last_call), close=wait
    )
    _, least, most = sizes(members, way)
    addr = loopback_addr(dr.DynamicRendezvousHandler.from_backend)
    handlers, stores, counters = [], [], []
    for _ in range(count):
        store = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
        counted = Counted(store)
        backend = C10dRendezvousBackend(counted, RUN_ID)  # type: ignore[arg-type]
        handlers.append(
            dr.DynamicRendezvousHandler.from_backend(
                RUN_ID,
                store,
                backend,
                min_nodes=least,
                max_nodes=most,
                timeout=timeout,
                **addr,  # torch adds the pid and a counter
            )
        )
        counters.append(counted)
        stores.append(store)
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
    print("ready", flush=True)
    me = [described(h._this_node) for h in handlers]
    print(json.dumps(me), flush=True)
    control.get("bench/seeded")
    for handler in handlers:  # the round before, as every node knows it (not counted)
        handler._state_holder.sync()
    for counted in counters:
        counted.reset()
    results: List[Dict[str, Any]] = []
    lock = threading.Lock()

    def node(index: int, handler: Any, store: Any) -> None:
        if index < members - 1:  # a live member: restarted by the signal
            store.get("bench/go")
        try:
            info: Any = handler.next_rendezvous()
            rank: Any = info.rank if hasattr(info, "rank") else info[1]
        except Exception:  # torch's join timeout: the node never had a rank
            rank = None
        done = time.time()
        with lock:
            results.append(
                {
                    "node": index,
                    "done": done,
                    "rank": rank,
                    "round": handler._state_holder.state.round,
                }
            )

    lost = members - 1
    threads = [
        threading.Thread(target=node, args=(first + k, h, s), daemon=True)
        for k, (h, s) in enumerate(zip(handlers, stores))
        if first + k != lost
    ]
    print("synced", flush=True)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    start = float(control.get("bench/go"))
    for row in results:
        row["s"] = row.pop("done") - start
    print(json.dumps({"nodes": results, **counts(counters)}), flush=True)
    os._exit(0)  # torch's keep-alives go on in the background


def run(
    members: int, way: str, processes: int, join: float, last_call: float, mode: str
) -> Dict[str, Any]:
    """The next round of a job of ``members`` nodes after its last node rank was lost."""
    import psutil
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    total, least, most = sizes(members, way)
    server, port = start_server(join + 900, timeout=join + 60)
    children: List[Any] = []
    try:  # the server and the clients end with the run, also when it fails
        me = str(Path(__file__).resolve())
        extra = (members, way, join, last_call, mode)
        children += start_clients(me, "--agents", port, total, processes, *extra)
        descs: List[List[Any]] = []
        for child in children:
            assert child.stdout is not None
            descs += json.loads(child.stdout.readline())
        tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
        control = tcp_store(
            "127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60)
        )
        backend = C10dRendezvousBackend(control, RUN_ID)
        # what torch's sanitize leaves of round 1 once the last member's heartbeat expired
        written = backend.set_state(pickle.dumps(round_state(descs[: members - 1])))
        assert written is not None, "the state was not written"
        stamped = time.monotonic()  # the round's heartbeats
        control.set("bench/seeded", "1")
        for child in children:
            assert child.stdout is not None
            said = child.stdout.readline().strip()
            assert said == "synced", said
        if way == "spare":  # the spare is in torch's wait list before the restart
            deadline = time.monotonic() + SPARE_WAIT
            while time.monotonic() < deadline:
                got = backend.get_state()
                assert got is not None
                state = pickle.loads(got[0])
                if state.wait_list or getattr(state, "redundancy_list", None):
                    break
                time.sleep(0.2)
            else:
                raise SystemExit(f"the spare was not in torch's wait list after {SPARE_WAIT:.0f} s")
        served = psutil.Process(server.pid)
        cpu0 = served.cpu_times()
        stamped_s = time.monotonic() - stamped
        control.set("bench/go", repr(time.time()))
        found, ops = gathered(children, join + 600)
        cpu1 = served.cpu_times()
        size = least if way == "shrink" else most
        ranked = [r for r in found if r["rank"] is not None]
        assert len(found) == total - 1, (len(found), total)
        assert sorted(r["rank"] for r in ranked) in ([], list(range(size))), "ranks"
        assert all(r["round"] == 2 for r in ranked), "the next round is torch's round 2"
        return {
            "torch": torch_release(),
            "mode": mode,
            "way": way,
            "nodes": members,
            "next_round": size,
            **round_figures(found, size, ops),
            "server_cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 2),
            "heartbeats_age_s": round(stamped_s, 1),
        }
    finally:  # the server and the clients end here
        for proc in (server, *children):
            proc.kill()
            proc.wait()


COLUMNS = [
    ("mode", "mode"),
    ("way", "way on"),
    ("nodes", "job nodes"),
    ("next_round", "next round"),
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
#: The figures whose growth with N is fitted.
GROWTH = ("compare_set_tries", "compare_set_won", "moved_mb")
#: The release table: the round's main figures, per release (titles as in :data:`COLUMNS`).
_RELEASE_KEYS = (
    "mode",
    "way",
    "nodes",
    "ranked",
    "all_ranked_s",
    "compare_set_tries",
    "compare_set_won",
    "moved_mb",
)
RELEASE_COLUMNS = [("torch", "torch")] + [c for c in COLUMNS if c[0] in _RELEASE_KEYS]


def plot(rows: List[Dict[str, Any]], path: Path) -> None:
    """Tries and writes won per node of the next round, and the time to every rank, against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels: List[Tuple[Callable[[Dict[str, Any]], float], str, str]] = [
        (
            lambda r: float(r["compare_set_tries"]) / r["next_round"],
            "compare_set tries per node",
            "",
        ),
        (lambda r: float(r["compare_set_won"]) / r["next_round"], "writes won per node", ""),
        (lambda r: float(r["all_ranked_s"]), "next round: every rank", "s"),
    ]
    styles = {(m, w): s for (m, w), s in zip(((m, w) for m in MODES for w in WAYS), "os^v")}
    for ax, (value, title, unit) in zip(axes, panels):
        for (mode, way), marker in styles.items():
            mine = [
                r
                for r in rows
                if r["mode"] == mode and r["way"] == way and r["all_ranked_s"] is not None
            ]
            if mine:
                xs, ys = [r["nodes"] for r in mine], [value(r) for r in mine]
                ax.plot(xs, ys, marker + "-", label=f"{mode}, {way}")
        sizes_ = sorted({r["nodes"] for r in rows})
        ax.set(title=title, xlabel="job nodes", ylabel=unit, yscale="log")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes_, [str(n) for n in sizes_])
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--agents":
        port, first, count, members = (int(x) for x in sys.argv[2:6])
        way, join, last_call, mode = (
            sys.argv[6],
            float(sys.argv[7]),
            float(sys.argv[8]),
            sys.argv[9],
        )
        agents(port, first, count, members, way, join, last_call, mode)
        return
    from torchrun_jsc.torch_defaults import LAST_CALL_TIMEOUT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument(
        "--join-timeout", type=float, default=300.0, help="torch's join timeout (s): the bound"
    )
    parser.add_argument(
        "--last-call", type=float, default=float(LAST_CALL_TIMEOUT), help="torch's last call (s)"
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--plot", type=Path, help="write the plot here (matplotlib)")
    parser.add_argument(
        "--rows",
        type=Path,
        nargs="+",
        help="instead of a run: the table, fit and plot of the JSON rows these files hold",
    )
    parser.add_argument(
        "--releases",
        type=Path,
        nargs="+",
        help="instead of a run: one table of the JSON rows these files hold, per torch release",
    )
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    if args.releases:
        lines = table(read_rows(args.releases), RELEASE_COLUMNS)
        print("\n".join(lines))
        if args.record:
            body = "\n".join(lines) + "\n"
            record("scale-recovery-round-releases", body, ROOT / "docs" / "benchmarks.md")
        return
    if args.rows:
        rows = read_rows(args.rows)
    else:
        if min(args.nodes) < 2:
            parser.error(f"--nodes: a job of at least 2 nodes, not {min(args.nodes)}")
        isolate("scale_recovery.py")
        rows = []
        for n in args.nodes:
            for way in args.ways:
                for mode in args.modes:  # paired: both modes at one size and way, in a row
                    row = run(n, way, args.processes, args.join_timeout, args.last_call, mode)
                    row.update(processes=args.processes, last_call=args.last_call)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    lines = table(rows, COLUMNS)
    note = growth_note(rows)
    print("\n".join(lines) + note)
    if args.plot or args.record:
        plot(rows, args.plot or PLOT)
    if args.record:
        body = "\n".join(lines) + "\n" + note
        record("scale-recovery-round", body, ROOT / "docs" / "benchmarks.md")


def growth_note(rows: List[Dict[str, Any]]) -> str:
    """The rows' releases, client processes and last calls, and each mode and way's growth
    with N, fitted over the rounds that formed."""
    pairs = [
        (m, w) for m in MODES for w in WAYS if any(r["mode"] == m and r["way"] == w for r in rows)
    ]
    growth = "; ".join(
        f"{mode}, {way}: "
        + ", ".join(
            f"{title} ~ N^{exponent(mine, key):.2f}" for key, title in COLUMNS if key in GROWTH
        )
        + f" ({sum(1 for r in mine if formed(r))} sizes)"
        for mode, way in pairs
        for mine in [[r for r in rows if r["mode"] == mode and r["way"] == way]]
    )

    def said(key: str, unit: str = "") -> str:
        return ", ".join(sorted({f"{r.get(key, '?')}{unit}" for r in rows}))

    return (
        f"\ntorch {said('torch')}, {said('processes')} client processes, last call"
        f" {said('last_call', ' s')}. Growth with N (least-squares fit over the rounds that"
        f" formed): {growth}.\n"
    )


if __name__ == "__main__":
    main()
