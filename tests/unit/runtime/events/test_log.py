"""The event log's writer: lines appended by its own thread, a refusing file costs one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchrun_jsc.runtime.events import entry
from torchrun_jsc.runtime.events.log import EventLog


def test_events_are_appended_in_order_after_what_the_file_held(tmp_path: Path) -> None:
    path = tmp_path / "job.events.jsonl"
    path.write_text("an earlier run's line\n")
    ticks = iter(range(100, 200))
    log = EventLog(str(path), "4711", 1, "node0", clock=lambda: float(next(ticks)))
    log.write("launch", nodes=4)
    log.write("round", restart=0, members=lambda: [entry.node("node0", 0)])
    log.write("end", exit_code=0)
    assert log.close(5.0)
    lines = path.read_text().splitlines()
    assert lines[0] == "an earlier run's line"
    found = entry.read(lines)
    assert found.skipped == 1
    assert [(e.event, e.time, e.job, e.run, e.node) for e in found.entries] == [
        ("launch", 100.0, "4711", 1, "node0"),
        ("round", 101.0, "4711", 1, "node0"),
        ("end", 102.0, "4711", 1, "node0"),
    ]
    # a field asked for at the write is written as its value
    assert found.entries[1].get("members") == [{"name": "node0", "node_rank": 0}]
    assert [e.event for e in log.entries] == ["launch", "round", "end"]


def test_a_file_that_cannot_be_written_costs_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "no-such-folder" / "job.events.jsonl"
    log = EventLog(str(path), "1", 0, "node0")
    for i in range(3):
        log.write("stop", cause=f"c{i}")
    assert log.close(5.0)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"torchrun_jsc: event log: cannot write {path} (")
    assert err[0].endswith("the job goes on without it")
    assert log.failed
    assert len(log.entries) == 3  # kept for the summary all the same


def test_close_without_events_starts_no_thread(tmp_path: Path) -> None:
    log = EventLog(str(tmp_path / "x"))
    assert log.close(0.0)
    assert not os.path.exists(tmp_path / "x")


def test_close_is_bounded_when_a_field_hangs(tmp_path: Path) -> None:
    import threading

    release = threading.Event()
    log = EventLog(str(tmp_path / "x"))
    log.write("round", members=lambda: release.wait(10))
    assert not log.close(0.2)
    release.set()
    assert log.close(5.0)
    assert [e.event for e in entry.read((tmp_path / "x").read_text().splitlines()).entries] == [
        "round"
    ]
