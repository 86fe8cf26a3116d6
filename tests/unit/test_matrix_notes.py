"""scripts/matrix's notes under the compatibility table: grouped by text, read back, re-rendered."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix import cli, notes, scenarios  # noqa: E402
from matrix.config import MatrixError  # noqa: E402

from . import matrixing  # noqa: E402
from .matrixing import table_rows  # noqa: E402

#: The shared fixture (tests/unit/matrixing.py).
environ = matrixing.environ


# --------------------------------------------------------------------------- grouped notes

COLUMNS = ["1.13.1", "2.0.1", "2.1.2", "2.3.1", "2.6.0", "2.7.1"]


@pytest.mark.parametrize(
    ("versions", "label"),
    [
        (COLUMNS, "1.13.1-2.7.1 (all 6)"),
        (["1.13.1", "2.0.1", "2.1.2", "2.6.0", "2.7.1"], "1.13.1-2.1.2, 2.6.0, 2.7.1 (5)"),
        (["2.0.1", "2.6.0"], "2.0.1, 2.6.0"),
        (["2.3.1", "2.6.0"], "2.3.1, 2.6.0"),
        (["2.7.1"], "2.7.1"),
        (["2.9.1", "1.13.1", "2.0.1", "2.1.2"], "1.13.1-2.1.2, 2.9.1 (4)"),
        (["2.2.2"], "2.2.2"),
    ],
)
def test_release_labels_read_back(versions: list[str], label: str) -> None:
    assert notes.release_label(versions, COLUMNS) == label
    assert sorted(notes.parse_label(label, COLUMNS)) == sorted(versions)


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("2.7.1-1.13.1", "runs backwards"),
        ("1.13.1-2.9.1", "is no range of columns"),
        ("1.13.1-2.1.2 (4)", "counts 4, but names 3"),
        ("2.3.1, 2.6.0 (all 6)", "counts 6, but names 2"),
    ],
)
def test_bad_labels_are_clear_errors(label: str, why: str) -> None:
    with pytest.raises(MatrixError, match=re.escape(why)):
        notes.parse_label(label, COLUMNS)


SHARED = "every scenario ran at abc1234"
EARLY = "the launch scenarios ran at def5678"


@pytest.mark.parametrize(
    ("per_release", "items"),
    [
        ({v: SHARED for v in COLUMNS}, [f"- 1.13.1-2.7.1 (all 6): {SHARED}"]),
        (
            {**{v: f"{EARLY}; {SHARED}" for v in COLUMNS}, "2.7.1": f"{SHARED}; own; more"},
            [
                f"- 1.13.1-2.6.0 (5): {EARLY}",
                f"- 1.13.1-2.7.1 (all 6): {SHARED}",
                "- 2.7.1: own; more",
            ],
        ),
        (
            {"2.3.1": f"{SHARED}; both", "2.6.0": f"both; {SHARED}; both", "2.0.1": SHARED},
            [f"- 2.0.1, 2.3.1, 2.6.0: {SHARED}", "- 2.3.1, 2.6.0: both"],
        ),
        ({"2.0.1": "", "2.1.2": "x"}, ["- 2.1.2: x"]),
        ({}, []),
    ],
)
def test_notes_are_grouped_by_text(per_release: dict[str, str], items: list[str]) -> None:
    assert notes.render_notes(per_release, COLUMNS) == items
    back = notes.parse_notes(items, COLUMNS)  # every part back, though maybe in another order
    assert {v: set(notes.note_parts(n)) for v, n in per_release.items() if n} == {
        v: set(notes.note_parts(n)) for v, n in back.items()
    }
    assert notes.render_notes(back, COLUMNS) == items


def test_old_one_line_per_release_notes_still_read() -> None:
    old = ["- 2.0.1: a; b", "- 2.7.1: b", "not a note", "- 2.1.2 no colon"]
    assert notes.parse_notes(old, COLUMNS) == {"2.0.1": "a; b", "2.7.1": "b"}


COMPAT = """\
- Date: 2026-01-02
- Commit: `abc1234`
- Python: 3.11.7

| scenario | 2.3.1 | 2.6.0 | 2.7.1 |
|---|---|---|---|
| `test_a::test_x` | pass | pass | **FAIL** |
| `test_a::test_y` | pass | skip | pass |

## Notes

- 2.3.1: shared; two
- 2.6.0: shared; two
- 2.7.1: shared; own
"""


def test_rerender_groups_the_notes_and_keeps_the_rest(tmp_path: Path, environ: Path) -> None:
    out = tmp_path / "compat.md"
    out.write_text(COMPAT)
    assert cli.main(["run-scenarios", "--rerender", "--output", str(out)]) == 0
    text = out.read_text()
    assert table_rows(text)[2:4] == table_rows(COMPAT)[2:]
    assert "- Date: 2026-01-02\n- Commit: `abc1234`\n- Python: 3.11.7\n" in text
    assert text.endswith("- 2.3.1-2.7.1 (all 3): shared\n- 2.3.1, 2.6.0: two\n- 2.7.1: own\n")
    assert cli.main(["run-scenarios", "--rerender", "--output", str(out)]) == 0
    assert out.read_text() == text


@pytest.mark.parametrize("extra", [["2.7.1"], ["--keep-previous"], ["--from-junit", "2.7.1=x"]])
def test_rerender_runs_nothing(tmp_path: Path, environ: Path, extra: list[str]) -> None:
    out = tmp_path / "compat.md"
    out.write_text(COMPAT)
    assert cli.main(["run-scenarios", "--rerender", "--output", str(out), *extra]) == 2
    assert out.read_text() == COMPAT
    assert cli.main(["run-scenarios", "--rerender", "--output", str(tmp_path / "none")]) == 2


def test_keep_previous_merges_a_partial_run_into_its_column() -> None:
    earlier, commit = scenarios.previous_runs(COMPAT)
    kept_notes = scenarios.previous_notes(COMPAT)
    full = {"test_a::test_x": "failed", "test_a::test_y": "passed"}
    runs = {"2.7.1": {"test_a::test_x": "passed"}, "2.6.0": dict(full)}
    run_notes: dict[str, str] = {}
    scenarios.merge_previous(runs, run_notes, earlier, kept_notes, commit, "new9876", "2026-02-03")
    assert runs == {
        "2.3.1": earlier["2.3.1"],  # not run: kept
        "2.6.0": full,  # run in full: the new column alone
        "2.7.1": {"test_a::test_x": "passed", "test_a::test_y": "passed"},  # one scenario
    }
    assert run_notes["2.3.1"].startswith("kept from the table of commit abc1234: ")
    assert "2.6.0" not in run_notes
    assert run_notes["2.7.1"] == (
        "shared; own; re-run on 2026-02-03 at commit new9876 without the rest of its column"
        " (kept as the table of commit abc1234 had it): test_a::test_x (pass)"
    )
    # kept again later: the kept note is not repeated, even where grouping put it second
    lines = ["- 2.0.1, 2.3.1: shared", "- 2.3.1: kept from the run at commit abc1234: x"]
    grouped = notes.parse_notes(lines, COLUMNS)
    assert grouped["2.3.1"] == "shared; kept from the run at commit abc1234: x"
    again: dict[str, str] = {}
    scenarios.merge_previous({}, again, {"2.3.1": runs["2.3.1"]}, grouped, "later", "", "")
    assert again == {"2.3.1": grouped["2.3.1"]}
