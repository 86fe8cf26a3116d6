"""Benchmark: what torchrun_jsc's heartbeats cost the node that serves the rendezvous store.

A real torch ``TCPStore`` server runs in its own process on loopback (as in the agent on the
store's node). ``--nodes`` simulated agents, spread over a few client processes, each hold their
own :class:`~torchrun_jsc.runtime.store.connection.JobStore` connection (torchrun_jsc's
second client per node) and beat as the job watch does: ``add(hb/<node>, 1)`` every
``heartbeats.interval_for(timeout)`` seconds, spread over the interval. One more process is the
watcher: every interval it reads all counters with ``JobStore.get_many`` and feeds a
:class:`~torchrun_jsc.runtime.watch.heartbeats.Tracker` (the same calls the session makes). After a
warm-up, for ``--seconds``: the server process's CPU time per second and its RSS, operations per
second, the watcher's scan time, and that no member was declared lost. With ``--lose``, one
node stops beating: the time from its last beat until the watcher declares it lost, and that
nobody else is (section lost-node-detection).

It runs in a network namespace of its own (``unshare -n``, loopback up, no DNS server): torch's
TCPStore looks up the peer's name for every connection, and a resolver that answers slowly (this
test machine's answers about five a second) would otherwise be what is measured. Needs root.

Prints; ``--record`` writes the table into docs/benchmarks.md (section heartbeat-load, or
lost-node-detection with ``--lose``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from loopback import isolate, raise_open_files, start_clients, start_server  # noqa: E402
from record import record  # noqa: E402
from torchrun_jsc.runtime.watch import heartbeats  # noqa: E402

#: Seconds after the start at which the lost node (``--lose``) beats no more.
LOSE_AFTER = 10.0


def lose_span(timeout: float) -> float:
    """The shortest span that sees the lost node declared: its loss, the timeout, two beats."""
    return LOSE_AFTER + timeout + 2 * heartbeats.interval_for(timeout)


def beat(port: int, first: int, count: int, seconds: float, timeout: float, lose: int) -> None:
    """Simulated agents ``first .. first+count-1``: one JobStore each, beating in turn. Node
    ``lose`` (when it is one of them) stops beating after :data:`LOSE_AFTER` seconds, as a node
    that is lost; its last beat's time (this machine's monotonic clock) is reported."""
    from torchrun_jsc.runtime.store.connection import JobStore

    raise_open_files()
    stores = [JobStore("127.0.0.1", port, "bench", timeout) for _ in range(count)]
    for k, store in enumerate(stores):
        store.first(f"hb/n{first + k}", "0")
    interval = heartbeats.interval_for(timeout)
    print("ready", flush=True)
    start = time.monotonic()
    ops = 0
    stopped = None
    while time.monotonic() - start < seconds:
        round_start = time.monotonic()
        for k, store in enumerate(stores):
            target = round_start + interval * k / count
            pause = target - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if first + k == lose and time.monotonic() - start >= LOSE_AFTER:
                continue  # lost: beats no more
            store.add(f"hb/n{first + k}", 1)
            ops += 1
            if first + k == lose:
                stopped = time.monotonic()
        pause = round_start + interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    print(json.dumps({"ops": ops, "stopped": stopped}), flush=True)


def watch(port: int, nodes: int, seconds: float, timeout: float) -> None:
    """The watcher: every interval, all counters with one get_many, into a Tracker."""
    from torchrun_jsc.runtime.store.connection import JobStore
    from torchrun_jsc.runtime.watch.heartbeats import Tracker

    store = JobStore("127.0.0.1", port, "bench", timeout)
    keys = [f"n{i}" for i in range(nodes)]
    tracker = Tracker(timeout)
    tracker.members(keys, time.monotonic())
    interval = heartbeats.interval_for(timeout)
    print("ready", flush=True)
    scans: List[float] = []
    declared: Dict[str, float] = {}
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.monotonic()
        # the counters exist: every beater created its own before it said "ready"
        values = store.get_many([f"hb/{k}" for k in keys])
        readings = {k: int(values[f"hb/{k}"]) for k in keys}
        for key in tracker.observe(readings, time.monotonic()):
            declared.setdefault(key, time.monotonic())
        scans.append(time.monotonic() - t0)
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    print(
        json.dumps(
            {
                "scan_ms": statistics.median(scans) * 1000,
                "scan_max_ms": max(scans) * 1000,
                "declared": declared,
            }
        ),
        flush=True,
    )


class Watch:
    """The job watch's load on a store: beaters over ``processes`` client processes and one
    watcher, for ``seconds``, started and ready; node ``nodes - 1`` is lost when ``lose``."""

    def __init__(
        self, port: int, nodes: int, seconds: float, timeout: float, processes: int, lose: bool
    ) -> None:
        me = str(Path(__file__).resolve())
        self.lost_node = nodes - 1 if lose else -1
        self.lose, self.seconds = lose, seconds
        self.beaters = start_clients(
            me, "--beat", port, nodes, processes, seconds, timeout, self.lost_node
        )
        self.watcher = subprocess.Popen(
            [sys.executable, me, "--watch", str(port), str(nodes), str(seconds), str(timeout)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.watcher.stdout is not None
        assert self.watcher.stdout.readline().strip() == "ready"

    def end(self) -> Dict[str, Any]:
        """Waits for the beaters and the watcher to end; their figures."""
        ops = 0
        stopped = None
        for child in self.beaters:
            out, _ = child.communicate(timeout=self.seconds + 60)
            report = json.loads(out.strip().splitlines()[-1])
            ops += report["ops"]
            stopped = report["stopped"] or stopped
        out, _ = self.watcher.communicate(timeout=self.seconds + 60)
        scan = json.loads(out.strip().splitlines()[-1])
        declared = scan["declared"]
        found = declared.get(f"n{self.lost_node}")
        return {
            "heartbeat_ops_per_s": round(ops / self.seconds, 1),
            "watch_scan_median_ms": round(scan["scan_ms"], 2),
            "watch_scan_max_ms": round(scan["scan_max_ms"], 2),
            "lost": len(declared),
            **(
                {
                    "false_alarms": len(set(declared) - {f"n{self.lost_node}"}),
                    "detected_after_s": (
                        None if found is None or stopped is None else round(found - stopped, 1)
                    ),
                }
                if self.lose
                else {}
            ),
        }


def run(nodes: int, seconds: float, timeout: float, processes: int, lose: bool) -> Dict[str, Any]:
    import psutil

    warmup = 3.0
    server, port = start_server(seconds + 120)
    watch = Watch(port, nodes, seconds, timeout, processes, lose)
    time.sleep(warmup)
    proc = psutil.Process(server.pid)
    cpu0, t0 = proc.cpu_times(), time.monotonic()
    time.sleep(seconds - 2 * warmup)
    cpu1, t1 = proc.cpu_times(), time.monotonic()
    rss = proc.memory_info().rss / 2**20
    figures = watch.end()
    server.kill()
    server.wait()
    busy = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return {
        "nodes": nodes,
        "interval_s": heartbeats.interval_for(timeout),
        "heartbeat_ops_per_s": figures.pop("heartbeat_ops_per_s"),
        "server_cpu_percent": round(100 * busy / (t1 - t0), 2),
        "server_rss_mib": round(rss, 1),
        **figures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1024])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=60.0, help="TORCHRUN_JSC_PEER_TIMEOUT")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--record", action="store_true")
    parser.add_argument(
        "--lose",
        action="store_true",
        help=f"one node stops beating {LOSE_AFTER:g} s in: the time until it is declared lost",
    )
    parser.add_argument("--beat", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--watch", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.beat:
        port, first, count, seconds, timeout, lose = args.beat
        beat(int(port), int(first), int(count), float(seconds), float(timeout), int(lose))
        return
    if args.watch:
        port, nodes, seconds, timeout = args.watch
        watch(int(port), int(nodes), float(seconds), float(timeout))
        return
    if args.lose:
        least = lose_span(args.timeout)
        if args.seconds < least:
            parser.error(
                f"--lose needs --seconds of at least {least:g} (the loss, the timeout and two"
                f" beats), got {args.seconds:g}"
            )
    isolate("heartbeat_load.py")
    raise_open_files()
    rows = [run(n, args.seconds, args.timeout, args.processes, args.lose) for n in args.nodes]
    for row in rows:
        print(json.dumps(row))
    if args.record:
        keys = list(rows[0])
        lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
        note = (
            f"\n{args.seconds:g} s per size after a warm-up; the server is torch's TCPStore in"
            " its own process, the CPU figure is its user+system time per wall second."
        )
        if args.lose:
            note += (
                f" One node beat no more {LOSE_AFTER:g} s in; detected_after_s counts from its"
                f" last beat until the watcher declared it lost (peer timeout {args.timeout:g} s)."
            )
        name = "lost-node-detection" if args.lose else "heartbeat-load"
        record(name, "\n".join(lines) + "\n" + note, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
