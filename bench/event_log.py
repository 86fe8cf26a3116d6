"""Benchmark: what the event log costs the rendezvous host during a 16-node recovery.

The events one recovery of a 16-node job writes (a lost node, the new round with its 16 members
by name, the restart), after the launch and the first round, go through the real
:class:`~torchrun_jsc.runtime.events.log.EventLog` into a file, ``--rounds`` times; counted: the
bytes and the write calls per recovery (machine-independent), and the host's CPU time for them as
a share of the recovery it records (``--recovery``: seconds from a loss to the next round's first
step, 23.3 s on the namespace cluster in test_recovery's two-losses scenario). Also the summary
line's cost: reading the file back and computing the run's account. No network.

Prints; ``--record`` writes the table into docs/benchmarks.md (section event-log).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from record import record  # noqa: E402
from torchrun_jsc.runtime.events import entry  # noqa: E402
from torchrun_jsc.runtime.events.account import account, summary_line  # noqa: E402
from torchrun_jsc.runtime.events.log import EventLog  # noqa: E402


def members(nodes: int, without: int = -1) -> List[Dict[str, Any]]:
    return [entry.node(f"jwb{i:04d}", i) for i in range(nodes) if i != without]


def recovery(log: EventLog, nodes: int, restart: int) -> None:
    """The events of one recovery: node ``restart`` lost, a spare in its place."""
    lost = entry.node(f"jwb{restart:04d}", restart)
    spare = entry.node(f"jwb{nodes + restart:04d}", nodes + restart)
    log.write(
        entry.LOST,
        lost=lost,
        more=0,
        detection="heartbeat",
        quiet=10.2,
        last_seen=entry.iso(time.time() - 10),
        next=entry.RESTART,
    )
    log.write(
        entry.ROUND,
        restart=restart,
        size=nodes,
        spares=0,
        members=lambda: [*members(nodes, restart), spare],
        host=entry.node("jwb0000", 0),
    )
    log.write(entry.RESTART, restart=restart, left=[lost], came=[spare], size=nodes)


def measure(nodes: int, rounds: int) -> Dict[str, float]:
    writes = 0
    real_write = os.write

    def counted(fd: int, data: bytes) -> int:
        nonlocal writes
        writes += 1
        return real_write(fd, data)

    cpu: List[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.events.jsonl")
        log = EventLog(path, "4711", 0, "jwb0000")
        log.write(entry.LAUNCH, nodes=nodes + rounds, torch="2.13.0")
        log.write(entry.ROUND, restart=0, size=nodes, spares=rounds, members=members(nodes))
        log.close(10)
        before = os.path.getsize(path)
        with mock.patch("torchrun_jsc.runtime.events.log.os.write", counted):
            for restart in range(1, rounds + 1):
                start = time.process_time()
                recovery(log, nodes, restart)
                assert log.close(10)
                cpu.append(time.process_time() - start)
        size = os.path.getsize(path) - before
        start = time.process_time()
        with open(path) as file:
            found = entry.read(file.read().splitlines())
        summary_line(account(list(found.entries)))
        summary_cpu = time.process_time() - start
    return {
        "bytes_per_recovery": size / rounds,
        "writes_per_recovery": writes / rounds,
        "cpu_ms_per_recovery_median": 1000 * statistics.median(cpu),
        "summary_cpu_ms": 1000 * summary_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--recovery", type=float, default=23.3)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    found = measure(args.nodes, args.rounds)
    share = found["cpu_ms_per_recovery_median"] / 1000 / args.recovery
    rows = [
        "| nodes | bytes per recovery | writes per recovery | host CPU per recovery (ms,"
        " median) | share of the recovery | summary at the end (ms) |",
        "|---|---|---|---|---|---|",
        f"| {args.nodes} | {found['bytes_per_recovery']:.0f}"
        f" | {found['writes_per_recovery']:.0f}"
        f" | {found['cpu_ms_per_recovery_median']:.2f} | {share:.1e}"
        f" | {found['summary_cpu_ms']:.1f} |",
    ]
    body = "\n".join(rows) + (
        f"\n\n{args.rounds} recoveries in one file (the summary reads all of them back); the"
        f" share is the CPU time over the {args.recovery:g} s from a loss to the next round's"
        " first step measured on the namespace cluster."
    )
    print(body)
    if args.record:
        record("event-log", body, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
