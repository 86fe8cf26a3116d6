"""A run's account from its events, and the summary line (pure, hand-written logs)."""

from __future__ import annotations

import calendar
from typing import Any, Dict, List

import pytest

from torchrun_jsc.runtime.events import account, entry
from torchrun_jsc.runtime.events.entry import Entry

T0 = calendar.timegm((2026, 12, 5, 10, 0, 0))


def n(name: str, rank: int) -> Dict[str, Any]:
    return entry.node(name, rank)


def ev(t: float, event: str, run: int = 0, **fields: Any) -> Entry:
    return Entry(T0 + t, event, "4711", run, "node0", fields)


FIVE = [n(f"node{i}", i) for i in range(4)]


def two_losses() -> List[Entry]:
    """4 of 5 nodes train (node4 a spare); node3 goes quiet at 100 s, declared at 110 s, the
    spare's round forms at 130 s; node2 quiet at 300 s, declared at 310 s, 3 nodes go on at
    335 s; the job ends at 400 s."""
    return [
        ev(0, "launch", nodes=5),
        ev(10, "round", restart=0, members=FIVE, spares=1),
        ev(110, "lost", lost=FIVE[3], last_seen=entry.iso(T0 + 100), next="restart"),
        ev(130, "round", restart=1, members=[*FIVE[:3], n("node4", 4)], spares=0),
        ev(130, "restart", restart=1, left=[FIVE[3]], came=[n("node4", 4)], size=4),
        ev(310, "lost", lost=FIVE[2], last_seen=entry.iso(T0 + 300), next="restart"),
        ev(335, "round", restart=2, members=[*FIVE[:2], n("node4", 4)], spares=0),
        ev(400, "end", exit_code=0, outcome="succeeded"),
    ]


def test_two_losses_each_with_its_time_to_train_again() -> None:
    (run,) = account.runs(two_losses())
    assert (run.job, run.run, run.nodes, run.length) == ("4711", 0, 5, 400.0)
    assert [r.restart for r in run.rounds] == [0, 1, 2]
    assert [(loss.name, loss.back_after) for loss in run.losses] == [
        ("node3 (node rank 3)", 30.0),
        ("node2 (node rank 2)", 35.0),
    ]
    # 4 nodes 10..100 s, 4 nodes 130..300 s, 3 nodes 335..400 s, out of 5 nodes x 400 s
    assert [r.trained for r in run.rounds] == [360.0, 680.0, 195.0]
    assert run.goodput == pytest.approx(1235 / 2000)
    assert run.exit_code == 0


def test_the_summary_line_says_it_all_in_one_line() -> None:
    (run,) = account.runs(two_losses())
    line = account.summary_line(run)
    assert line == (
        "torchrun_jsc: summary: job 4711 run 0 ran 6m40s; 3 rounds, 2 restarts; lost node3"
        " (node rank 3) at 10:01:40Z, training again after 30 s; node2 (node rank 2) at"
        " 10:05:00Z, training again after 35 s; requeues so far 0; 62% of 5 nodes' time"
        " trained"
    )


def test_a_loss_the_run_did_not_recover_from_and_its_requeue() -> None:
    events = [
        ev(0, "launch", run=1, nodes=2),
        ev(5, "round", run=1, restart=0, members=FIVE[:2]),
        ev(65, "lost", run=1, lost=FIVE[1], last_seen=entry.iso(T0 + 55), next="stop"),
        ev(66, "stop", run=1, cause="node1 lost"),
        ev(80, "requeue", run=1, cause="lost node", excluded=["node1"], done=True),
        ev(81, "end", run=1, exit_code=1),
    ]
    (run,) = account.runs(events)
    assert run.losses[0].back_after is None
    assert run.requeued and run.exit_code == 1
    assert run.rounds[0].trained == 2 * 50.0
    line = account.summary_line(run)
    assert "node1 (node rank 1) at 10:00:55Z, not trained again" in line
    assert "requeues so far 2" in line


def test_runs_split_by_job_and_run_whatever_the_order() -> None:
    first = two_losses()
    second = [ev(1000, "launch", run=1, nodes=5), ev(1010, "round", run=1, restart=0)]
    runs = account.runs([*second, *reversed(first)])
    assert [(r.run, len(r.rounds)) for r in runs] == [(0, 3), (1, 1)]


def test_odd_fields_count_as_unknown_not_as_errors() -> None:
    events = [
        ev(0, "round", members="everyone", size="big", restart=None, spares=-3),
        ev(5, "lost", lost="nodeX", last_seen="a while ago"),
        ev(9, "end", exit_code="zero"),
    ]
    (run,) = account.runs(events)
    assert run.nodes == 0 and run.goodput is None and run.exit_code is None
    assert run.losses == (account.Loss("nodeX", T0 + 5, T0 + 5, None),)


@pytest.mark.parametrize(
    ("seconds", "shown"), [(41.4, "41 s"), (843, "14m03s"), (7500, "2h05m"), (0, "0 s")]
)
def test_durations(seconds: float, shown: str) -> None:
    assert account.duration(seconds) == shown
