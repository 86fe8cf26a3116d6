"""``python -m torchrun_jsc.report``: a job across its runs from hand-written logs (merged by
time, with corrupted and out-of-order lines), its table, its timeline rows and picture."""

from __future__ import annotations

import calendar
import struct
from pathlib import Path
from typing import Any, Dict, List

import pytest

from torchrun_jsc.report import plot
from torchrun_jsc.report.__main__ import main
from torchrun_jsc.report.job import jobs, table
from torchrun_jsc.runtime.events import entry
from torchrun_jsc.runtime.events.entry import Entry

T0 = calendar.timegm((2026, 12, 5, 10, 0, 0))


def n(i: int) -> Dict[str, Any]:
    return entry.node(f"node{i}", i)


def ev(t: float, event: str, run: int, **fields: Any) -> Entry:
    return Entry(T0 + t, event, "4711", run, "node0", fields)


def first_run() -> List[Entry]:
    """Run 0: 4 nodes train from 10 s; node3 quiet at 100 s, the job cannot go on, requeued
    without it at 115 s."""
    return [
        ev(0, "launch", 0, nodes=4),
        ev(10, "round", 0, restart=0, members=[n(i) for i in range(4)], spares=0),
        ev(110, "lost", 0, lost=n(3), last_seen=entry.iso(T0 + 100), next="stop"),
        ev(111, "stop", 0, cause="node3 lost; cannot go on"),
        ev(114, "end", 0, exit_code=1, outcome="failed"),
        ev(115, "requeue", 0, cause="lost node", excluded=["node3"], done=True),
    ]


def second_run() -> List[Entry]:
    """Run 1, 185 s after run 0 ended: 4 nodes (node4 in node3's place) from 200 s to 500 s."""
    members = [n(0), n(1), n(2), n(4)]
    return [
        ev(300, "launch", 1, nodes=4),
        ev(310, "round", 1, restart=0, members=members, spares=0),
        ev(500, "end", 1, exit_code=0, outcome="succeeded"),
    ]


def write(path: Path, entries: List[Entry], extra: str = "") -> None:
    path.write_text("".join(entry.encode(e) + "\n" for e in entries) + extra)


def test_two_runs_with_a_requeue_between_them() -> None:
    (job,) = jobs([*second_run(), *first_run()])
    assert [r.run for r in job.runs] == [0, 1]
    assert job.gaps[0].seconds == 300 - 115
    # run 0: 4 x 90 s of 4 x 115 s; run 1: 4 x 190 s of 4 x 200 s
    assert job.trained == 4 * 90 + 4 * 190
    assert job.goodput == pytest.approx((360 + 760) / (460 + 800))
    text = table(job)
    assert text.splitlines()[0] == (
        "job 4711: 2 runs, 2 rounds, 1 node lost, 0 recovered inside the allocation,"
        " 1 requeue; 89% of the nodes' time trained"
    )
    assert "  run 0: node3 (node rank 3) at 10:01:40Z, not trained again in that run" in text
    assert "  requeue: run 0 to run 1: 3m05s until the next run started" in text
    rows = [row.split() for row in text.splitlines()[3:5]]
    day = ["2026-12-05"]
    assert rows[0] == ["0", *day, "10:00:00", "1m55s", "4", "1", "1", "0", "requeued", "78%"]
    assert rows[1] == ["1", *day, "10:05:00", "3m20s", "4", "1", "0", "0", "exit", "0", "95%"]


def test_the_timeline_has_a_row_per_node_in_node_rank_order() -> None:
    (job,) = jobs([*first_run(), *second_run()])
    timeline = plot.rows(job)
    assert [r.node for r in timeline.rows] == [f"node{i} (node rank {i})" for i in (0, 1, 2, 3, 4)]
    node3 = timeline.rows[3]
    assert node3.spans == ((10.0, 100.0),) and node3.lost == (100.0,)
    assert timeline.rows[4].spans == ((310.0, 500.0),)
    assert timeline.gaps == ((115.0, 300.0),)
    assert timeline.length == 500.0


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_command_merges_files_skips_bad_lines_and_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "run1.jsonl", tmp_path / "run0.jsonl"
    write(a, second_run(), extra='{"time": "cut off\n')
    write(b, first_run(), extra="garbage\n")
    picture = tmp_path / "timeline.png"
    assert main([str(a), str(b), "--plot", str(picture)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job 4711: 2 runs, 2 rounds")
    assert "2 line(s) skipped: not an event (cut off or corrupted)" in out
    assert f"timeline of job 4711: {picture}" in out
    width, height = png_size(picture)
    # 5 rows: the figure grows by 0.4 inch a row at 100 dpi
    assert width == 1000 and height == round(100 * (1.2 + 0.4 * 5))


def test_an_svg_is_drawn_too(tmp_path: Path) -> None:
    log, picture = tmp_path / "e.jsonl", tmp_path / "t.svg"
    write(log, first_run())
    assert main([str(log), "--plot", str(picture)]) == 0
    assert picture.read_text().lstrip().startswith(("<?xml", "<svg"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "{missing}: cannot read it (No such file or directory)"),
        (
            ["{log}", "--plot", "t.pdf"],
            "--plot t.pdf: accepted: a file name ending in .png or .svg",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: List[str], message: str
) -> None:
    log = tmp_path / "e.jsonl"
    write(log, first_run())
    names = {"missing": str(tmp_path / "nope.jsonl"), "log": str(log)}
    assert main([a.format(**names) for a in args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"torchrun_jsc.report: {message.format(**names)}"]


def test_a_file_without_events_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "e.jsonl"
    log.write_text("not an event\n")
    assert main([str(log)]) == 1
    assert capsys.readouterr().err.strip() == f"torchrun_jsc.report: no events in {log}"


def test_without_matplotlib_plot_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    log = tmp_path / "e.jsonl"
    write(log, first_run())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert main([str(log), "--plot", str(tmp_path / "t.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "torchrun_jsc.report: --plot needs matplotlib: pip install 'torchrun_jsc[report]'"
        " (or matplotlib)"
    )
    assert not (tmp_path / "t.png").exists()
