"""Benchmark: torch's rendezvous keep-alives in steady state, with many simulated nodes.

What is real: a torch ``TCPStore`` server in its own process on loopback (as on the rendezvous
host), and per simulated node torch's own ``DynamicRendezvousHandler`` (c10d backend, its own
TCPStore client) whose keep-alive timer runs torch's own keep-alive code: every
``keep_alive_interval`` (5 s) it reads the state blob, sanitizes it and, when its heartbeat is
due, writes the whole blob back with ``compare_set``. What is simulated: the round itself. The
bench writes a formed round's state (every node a participant, each heartbeat now) into the store
and each handler reads it and starts its heartbeats, as torch does after ``next_rendezvous()``;
the nodes are threads over several client processes (``--processes``), all on this machine's
cores. Each size runs for plain torch and for torch with this checkout's ``backoff`` patch
(``--modes``), one after the other.

For ``--seconds`` after one interval's warm-up: the state operations per second (compare_set
tries, those that won, gets), the bytes moved per node and second, the store server's CPU share,
the client processes' CPU share (when it nears the machine's cores, the simulation is what
limits), torch's "failed to send a keep-alive heartbeat" warnings, and, from the state read once
a second, the oldest heartbeat's age and the fewest participants seen: a live node whose
heartbeat grew older than the expiry (``keep_alive_interval`` times ``keep_alive_max_attempt``,
15 s) is removed by torch's sanitize, which no node of a job can tell from a lost one.

What the two shared cores change: the nodes' timers start together, as after a real round, so
their keep-alives come in a herd, and every loser decodes the blob it got back before it tries
again. Real nodes decode in parallel, each on its own CPU; here the decodes of a herd run one
after the other, so a herd takes about N times one try's CPU over the cores instead of about one
try's time. The contention measured is an upper bound of what N real nodes see; the
machine-independent bound is ``scale_first_round.py --state-cost``.

The job watch's own beats are measured by heartbeat_load.py. Runs in a network namespace of its
own (``unshare -n``, loopback up). Needs root. Prints; ``--record`` writes the table into
docs/benchmarks.md (section scale-steady-state).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from heartbeat_load import Watch, lose_span  # noqa: E402
from loopback import (  # noqa: E402
    isolate,
    loopback_addr,
    raise_open_files,
    start_clients,
    start_server,
)
from record import record  # noqa: E402
from scale_first_round import (  # noqa: E402
    RUN_ID,
    Counted,
    described,
    every,
    exponent,
    round_state,
    table,
    torch_now,
    torch_release,
)
from torchrun_jsc.settings.table import variable  # noqa: E402

MODES = ("torch", "torchrun_jsc")
#: The job watch's peer timeout (TORCHRUN_JSC_PEER_TIMEOUT's default) and its client processes.
PEER_TIMEOUT = float(variable("TORCHRUN_JSC_PEER_TIMEOUT").default)
WATCH_PROCESSES = 4
#: The shortest span that sees the lost node declared.
SHORTEST_WATCH = lose_span(PEER_TIMEOUT)
#: torch's warning when a keep-alive did not land within its heartbeat deadline.
FAILED = "failed to send a keep-alive heartbeat"


class Warnings(logging.Handler):
    """Counts torch's failed keep-alives."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failed = 0

    def emit(self, record: logging.LogRecord) -> None:
        if FAILED in record.getMessage():
            self.failed += 1


def install_backoff() -> None:
    """This checkout's ``backoff`` patch with the plan's parameters for torch's default interval."""
    from torchrun_jsc.patches import backoff, install, params
    from torchrun_jsc.torch_defaults import KEEP_ALIVE_INTERVAL

    declined = install(
        params.Backoff(first=backoff.FIRST, cap=backoff.cap_for(KEEP_ALIVE_INTERVAL))
    )
    assert declined is None, declined


def totals(counters: List[Counted], warnings: Warnings) -> Dict[str, int]:
    """The counters' sums and the failed keep-alives, as the process reports them."""
    return {
        "tries": sum(c.tries for c in counters),
        "won": sum(c.won for c in counters),
        "gets": sum(c.gets for c in counters),
        "moved": sum(c.moved for c in counters),
        "failed": warnings.failed,
    }


def agents(port: int, first: int, count: int, nodes: int, mode: str, seconds: float) -> None:
    """Simulated nodes ``first .. first+count-1``: a handler each; prints ``ready``, then the
    handlers' node descriptions, and after ``bench/go`` starts their heartbeats; prints the
    counts at ``bench/from`` and ``bench/stop`` (waited for at most ``seconds`` and ten
    minutes)."""
    if mode == "torchrun_jsc":
        install_backoff()

    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    raise_open_files()
    warnings = Warnings()
    logging.getLogger(dr.__name__).addHandler(warnings)
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    wait = datetime.timedelta(seconds=seconds + 600)
    handlers, counters = [], []
    addr = loopback_addr(dr.DynamicRendezvousHandler.from_backend)
    for _ in range(count):
        store = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
        counted = Counted(store)
        backend = C10dRendezvousBackend(counted, RUN_ID)  # type: ignore[arg-type]
        handlers.append(
            dr.DynamicRendezvousHandler.from_backend(
                RUN_ID,
                store,
                backend,
                min_nodes=nodes,
                max_nodes=nodes,
                **addr,
            )
        )
        counters.append(counted)
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=wait)
    print("ready", flush=True)
    me = [described(h._this_node) for h in handlers]
    settings = handlers[0]._settings
    expiry = settings.keep_alive_interval.total_seconds() * settings.keep_alive_max_attempt
    print(json.dumps({"nodes": me, "expiry": expiry}), flush=True)
    control.get("bench/go")

    def start(handler: Any) -> None:
        handler._state_holder.sync()  # the formed round, as after next_rendezvous()
        handler._start_heartbeats()

    starters = [threading.Thread(target=start, args=(h,)) for h in handlers]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join()
    control.get("bench/from")
    before = totals(counters, warnings)
    control.get("bench/stop")
    after = totals(counters, warnings)
    print(json.dumps({k: after[k] - before[k] for k in after}), flush=True)
    os._exit(0)


def formed_round(nodes: List[List[Any]]) -> bytes:
    """torch's state of a formed, complete round of these nodes, every heartbeat now, pickled."""
    return pickle.dumps(round_state(nodes))


def run(nodes: int, processes: int, seconds: float, mode: str, watch: bool) -> Dict[str, Any]:
    """``seconds`` of steady state of ``nodes`` simulated nodes; its figures. ``watch``: the
    job watch's beats and scans on the same store too, with one node lost."""
    import psutil
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )

    from torchrun_jsc.torch_defaults import KEEP_ALIVE_INTERVAL

    server, port = start_server(seconds + 600, timeout=600)
    me = str(Path(__file__).resolve())
    children = start_clients(me, "--agents", port, nodes, processes, nodes, mode, seconds)
    descs: List[List[Any]] = []
    for child in children:
        assert child.stdout is not None
        told = json.loads(child.stdout.readline())
        descs += told["nodes"]
        expiry = told["expiry"]  # the same in every process: torch's settings
    tcp_store: Any = getattr(dist, "TCPStore")  # noqa: B009 - not re-exported for mypy
    control = tcp_store("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    backend = C10dRendezvousBackend(control, RUN_ID)
    beats = None
    if watch:  # ends on its own, after the measured span
        span = seconds + KEEP_ALIVE_INTERVAL + 5
        beats = Watch(port, nodes, span, PEER_TIMEOUT, WATCH_PROCESSES, lose=True)
    # the round's heartbeats are stamped now, when the nodes start theirs
    assert backend.set_state(formed_round(descs)) is not None
    control.set("bench/go", "1")
    time.sleep(KEEP_ALIVE_INTERVAL)  # warm-up: every node's first keep-alive is due after it
    server_proc = psutil.Process(server.pid)
    client_procs = [psutil.Process(c.pid) for c in children]

    def cpu(procs: List[Any]) -> float:
        return float(sum(t.user + t.system for t in (p.cpu_times() for p in procs)))

    s0, c0, t0 = cpu([server_proc]), cpu(client_procs), time.monotonic()
    control.set("bench/from", "1")
    oldest, fewest = 0.0, nodes
    while time.monotonic() - t0 < seconds:
        got = backend.get_state()
        assert got is not None
        state = pickle.loads(got[0])
        now = torch_now()
        ages = [(now - beat).total_seconds() for beat in state.last_heartbeats.values()]
        oldest = max([oldest, *ages])
        fewest = min(fewest, len(state.participants))
        time.sleep(1.0)
    control.set("bench/stop", "1")
    s1, c1, t1 = cpu([server_proc]), cpu(client_procs), time.monotonic()
    counts = {"tries": 0, "won": 0, "gets": 0, "moved": 0, "failed": 0}
    for child in children:
        out, _ = child.communicate(timeout=600)
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            counts[key] += value
    watched = beats.end() if beats else {}
    server.kill()
    server.wait()
    span = t1 - t0
    return {
        "torch": torch_release(),
        "mode": mode,
        "nodes": nodes,
        "tries_per_s": round(counts["tries"] / span, 1),
        "won_per_s": round(counts["won"] / span, 1),
        "needed_per_s": round(nodes / KEEP_ALIVE_INTERVAL, 1),
        "gets_per_s": round(counts["gets"] / span, 1),
        "kb_per_node_s": round(counts["moved"] / span / nodes / 1e3, 2),
        "server_cpu_percent": round(100 * (s1 - s0) / span, 1),
        "clients_cpu_percent": round(100 * (c1 - c0) / span),
        "failed_keep_alives": counts["failed"],
        "oldest_heartbeat_s": round(oldest, 1),
        "expiry_s": expiry,
        "live_nodes_removed": nodes - fewest,
        "beats_per_s": watched.get("heartbeat_ops_per_s", "--"),
        "false_alarms": watched.get("false_alarms", "--"),
        "detected_after_s": watched.get("detected_after_s", "--"),
    }


COLUMNS = [
    ("mode", "mode"),
    ("nodes", "nodes"),
    ("needed_per_s", "keep-alives due (/s)"),
    ("won_per_s", "writes won (/s)"),
    ("tries_per_s", "compare_set tries (/s)"),
    ("gets_per_s", "gets (/s)"),
    ("kb_per_node_s", "moved per node (kB/s)"),
    ("server_cpu_percent", "store CPU (%)"),
    ("clients_cpu_percent", "clients' CPU (%)"),
    ("failed_keep_alives", "failed keep-alives"),
    ("oldest_heartbeat_s", "oldest heartbeat (s)"),
    ("live_nodes_removed", "live nodes removed"),
]
#: With ``--watch``: the job watch's figures.
WATCH_COLUMNS = [
    ("beats_per_s", "job watch beats (/s)"),
    ("false_alarms", "others declared lost"),
    ("detected_after_s", "lost node declared after (s)"),
]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--agents":
        port, first, count, nodes = (int(x) for x in sys.argv[2:6])
        agents(port, first, count, nodes, sys.argv[6], float(sys.argv[7]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured, after a warm-up")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--watch",
        action="store_true",
        help="the job watch on the same store too (heartbeat_load.py's beaters and watcher),"
        f" one node lost; needs --seconds of at least {SHORTEST_WATCH:g}",
    )
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    if args.watch and args.seconds < SHORTEST_WATCH:
        parser.error(
            f"--watch needs --seconds of at least {SHORTEST_WATCH:g}, got {args.seconds:g}"
        )
    isolate("scale_steady.py")
    rows = []
    for n in args.nodes:
        for mode in args.modes:  # paired: both modes at one size, one after the other
            row = run(n, args.processes, args.seconds, mode, args.watch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    growth = "; ".join(
        f"{mode}: "
        + ", ".join(
            f"{title} ~ N^{exponent([r for r in rows if r['mode'] == mode], key, every):.2f}"
            for key, title in COLUMNS
            if key in ("tries_per_s", "kb_per_node_s", "server_cpu_percent")
        )
        for mode in args.modes
    )
    note = (
        f"\ntorch {torch_release()}, {args.processes} client processes, {args.seconds:g} s"
        f" per size after one keep-alive interval; the expiry is {rows[0]['expiry_s']} s."
        f" Growth with N (least-squares fit over these rows): {growth}.\n"
    )
    lines = table(rows, COLUMNS + (WATCH_COLUMNS if args.watch else []))
    print("\n".join(lines) + note)
    if args.record:
        record(
            "scale-steady-state", "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md"
        )


if __name__ == "__main__":
    main()
