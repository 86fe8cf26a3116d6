"""Failure records and the one line every agent ends with (pure)."""

from __future__ import annotations

import calendar
from typing import List, Optional

import pytest

from torchrun_jsc.runtime.records import report
from torchrun_jsc.runtime.records.report import FAILED, LOST, STOPPED, Record

NOON = calendar.timegm((2026, 11, 30, 12, 0, 0))


def rec(kind: str, host: str, t: float, **kw: object) -> Record:
    return Record(kind=kind, hostname=host, time=NOON + t, **kw)  # type: ignore[arg-type]


def test_record_json_round_trip_and_garbage() -> None:
    r = rec(FAILED, "node2", 1.5, node_rank=2, rank=9, local_rank=1, exitcode=-9, oom=True)
    assert Record.from_json(r.to_json()) == r
    for text in ["", "{", "[]", '{"kind": "nope"}', '{"kind": "failed"}', '{"kind":"lost","x":1}']:
        found = Record.from_json(text)
        assert found is None or (found.kind == LOST and found.hostname == "")


@pytest.mark.parametrize(
    ("records", "root"),
    [
        ([], None),
        ([rec(STOPPED, "n1", 0)], None),
        ([rec(FAILED, "n2", 5), rec(FAILED, "n1", 3)], "n1"),
        ([rec(STOPPED, "n0", 1), rec(FAILED, "n3", 2)], "n3"),
        ([rec(LOST, "n2", 2), rec(FAILED, "n0", 9)], "n2"),
        ([rec(LOST, "n2", 2), rec(FAILED, "n0", 2)], "n0"),
    ],
    ids=["none", "only-stopped", "earliest", "stopped-never-root", "lost-first", "tie-failed"],
)
def test_first_failure(records: List[Record], root: Optional[str]) -> None:
    found = report.first_failure(records)
    assert (found.hostname if found else None) == root


@pytest.mark.parametrize(
    ("code", "oom", "text"),
    [
        (3, False, "exited with code 3"),
        (0, False, "exited with code 0"),
        (-15, False, "was killed by SIGTERM"),
        (-9, True, "was killed by the out-of-memory killer (SIGKILL)"),
        (-200, False, "was killed by signal 200"),
        (None, False, "ended"),
    ],
)
def test_how_it_ended(code: Optional[int], oom: bool, text: str) -> None:
    assert report.how_it_ended(code, oom) == text


def test_report_line_names_the_root_and_counts_the_rest() -> None:
    records = [
        rec(STOPPED, "node0", 9, node_rank=0, ranks_ended=4),
        rec(
            FAILED,
            "node2",
            1.25,
            node_rank=2,
            rank=9,
            local_rank=1,
            exitcode=3,
            message="ValueError: bad batch",
            ranks_ended=4,
        ),
        rec(FAILED, "node1", 2, node_rank=1, rank=5, local_rank=1, exitcode=1, ranks_ended=4),
    ]
    assert report.report_line(records) == (
        "torchrun_jsc: first failure: node2 (node rank 2): rank 9 (local rank 1) exited with code"
        " 3 at 12:00:01.250 UTC: ValueError: bad batch; 11 ranks stopped after it"
    )
    assert report.report_line([rec(STOPPED, "n", 0)]) is None


def test_report_line_never_counts_below_zero() -> None:
    """A failure record that counts no ended rank (nothing else known): no count at all."""
    line = report.report_line([rec(FAILED, "node2", 0, node_rank=2, rank=2, exitcode=3)])
    assert line is not None and line.endswith("exited with code 3 at 12:00:00.000 UTC")


def test_report_line_for_a_lost_host() -> None:
    lost = rec(LOST, "node1", 0, node_rank=1, what="the rendezvous host node0i:29500")
    assert report.report_line([lost]) == (
        "torchrun_jsc: first failure: the rendezvous host node0i:29500 stopped responding (last"
        " heard from at 12:00:00.000 UTC)"
    )


def test_error_file_message_is_one_line() -> None:
    data = {"message": {"message": "RuntimeError: boom\nsecond line", "extraInfo": {}}}
    assert report.error_file_message(data) == "RuntimeError: boom"
    assert report.error_file_message({"message": "<NONE>"}) == "<NONE>"
    assert report.error_file_message({}) == ""
    assert len(report.first_line("x" * 1000)) == 300


# --------------------------------------------------------------------------- heartbeats


def test_ranks_that_ended_the_same_way_with_the_first_are_not_stopped_after_it() -> None:
    """SIGUSR1 without a handler killed both ranks of node0 at once: before, the line said
    '1 rank stopped after it'."""
    root = rec(FAILED, "node0", 0, node_rank=0, rank=0, local_rank=0, exitcode=-10, ranks_ended=2)
    line = report.report_line([root._replace(alike=1)])
    assert line == (
        "torchrun_jsc: first failure: node0 (node rank 0): rank 0 (local rank 0) was killed by"
        " SIGUSR1 at 12:00:00.000 UTC, 1 more rank the same way"
    )
    others = [rec(STOPPED, "node1", 1, node_rank=1, ranks_ended=2)]
    line = report.report_line([root._replace(alike=1), *others])
    assert line is not None and line.endswith("1 more rank the same way; 2 ranks stopped after it")
