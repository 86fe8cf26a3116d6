"""scripts/matrix's compatibility table: junit results read, rendered, read back and kept.

No venv is built or run here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix import cli, scenarios  # noqa: E402

from . import matrixing  # noqa: E402
from .matrixing import table_rows  # noqa: E402

#: The shared fixture (tests/unit/matrixing.py).
environ = matrixing.environ


# --------------------------------------------------------------------------- compatibility table

JUNIT_241 = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.cluster.test_launcher" name="test_srun_jsc_style[torch2.4.1]"/>
<testcase classname="tests.cluster.test_launcher"
          name="test_without_slurm[torch2.4.1-by-address]"/>
<testcase classname="tests.cluster.test_launcher"
          name="test_worker_crash_once_restarts[torch2.4.1]">
  <failure message="assert 3 == 4">AssertionError</failure></testcase>
<testcase classname="tests.cluster.test_preflight" name="test_good_job_ok_in_seconds[torch2.4.1]"/>
<testcase classname="tests.cluster.test_preflight" name="test_good_job_ok_in_seconds[torch2.4.1]">
  <error message="teardown">leftover namespace</error></testcase>
</testsuite></testsuites>
"""

JUNIT_1131 = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.cluster.test_launcher" name="test_srun_jsc_style[torch1.13.1]"/>
<testcase classname="tests.cluster.test_launcher"
          name="test_without_slurm[torch1.13.1-by-address]"><skipped message="slow"/></testcase>
<testcase classname="tests.cluster.test_launcher"
          name="test_worker_crash_once_restarts[torch1.13.1]"/>
</testsuite></testsuites>
"""

EXPECTED_ROWS = [
    "| scenario | 1.13.1 | 2.4.1 |",
    "|---|---|---|",
    "| `test_launcher::test_srun_jsc_style` | pass | pass |",
    "| `test_launcher::test_without_slurm[by-address]` | skip | pass |",
    "| `test_launcher::test_worker_crash_once_restarts` | pass | **FAIL** |",
    "| `test_preflight::test_good_job_ok_in_seconds` | -- | **ERROR** |",
    "| *passed / total* | 2/3 | 2/4 |",
]


@pytest.fixture
def junit_files(tmp_path: Path) -> dict[str, Path]:
    files = {"2.4.1": tmp_path / "241.xml", "1.13.1": tmp_path / "1131.xml"}
    files["2.4.1"].write_text(JUNIT_241)
    files["1.13.1"].write_text(JUNIT_1131)
    return files


def test_parse_junit_keeps_the_worst_outcome(junit_files: dict[str, Path]) -> None:
    assert scenarios.parse_junit(junit_files["2.4.1"]) == {
        "test_launcher::test_srun_jsc_style": "passed",
        "test_launcher::test_without_slurm[by-address]": "passed",
        "test_launcher::test_worker_crash_once_restarts": "failed",
        "test_preflight::test_good_job_ok_in_seconds": "error",
    }


def test_render_compat(junit_files: dict[str, Path]) -> None:
    runs = {v: scenarios.parse_junit(p) for v, p in junit_files.items()}
    text = scenarios.render_compat(
        runs, {"2.4.1": "hand-made", "1.13.1": ""}, "3.11.7", "abc1234", "2026-01-02"
    )
    assert table_rows(text) == EXPECTED_ROWS
    assert "- Date: 2026-01-02\n- Commit: `abc1234`\n- Python: 3.11.7\n" in text
    assert text.endswith("## Notes\n\n- 2.4.1: hand-made\n")


def test_previous_runs_read_back_what_render_compat_wrote(junit_files: dict[str, Path]) -> None:
    runs = {v: scenarios.parse_junit(p) for v, p in junit_files.items()}
    text = scenarios.render_compat(runs, {}, "3.11.7", "abc1234", "2026-01-02")
    assert scenarios.previous_runs(text) == (runs, "abc1234")


def test_run_scenarios_keeps_the_columns_not_run_now(
    junit_files: dict[str, Path], tmp_path: Path, environ: Path
) -> None:
    out = tmp_path / "compat.md"
    (first, first_xml), (second, second_xml) = list(junit_files.items())[:2]
    base = ["run-scenarios", "--output", str(out), "--python", sys.executable]
    assert cli.main([*base, "--from-junit", f"{first}={first_xml}"]) == 0
    assert cli.main([*base, "--keep-previous", "--from-junit", f"{second}={second_xml}"]) == 0
    text = out.read_text()
    both = {first: scenarios.parse_junit(first_xml), second: scenarios.parse_junit(second_xml)}
    assert scenarios.previous_runs(text)[0] == both
    assert f"- {first}: kept from the table of commit " in text
    assert f"- {second}:" not in text
    kept_note = scenarios.previous_notes(text)[first]
    # kept again by a run at a later commit: the column still names the run it was measured in
    out.write_text(re.sub(r"^- Commit: `[^`]+`", "- Commit: `later`", text, flags=re.M))
    assert cli.main([*base, "--keep-previous", "--from-junit", f"{second}={second_xml}"]) == 0
    assert scenarios.previous_notes(out.read_text())[first] == kept_note


def test_render_compat_without_scenarios() -> None:
    text = scenarios.render_compat({"2.4.1": {}}, {}, "3.11.7", "abc1234", "2026-01-02")
    assert table_rows(text) == []
    assert "No scenarios were collected." in text
    assert "## Notes" not in text


def test_run_scenarios_from_junit(
    junit_files: dict[str, Path], tmp_path: Path, environ: Path
) -> None:
    out = tmp_path / "compat.md"
    argv = ["run-scenarios", "--from-junit"]
    argv += [f"{v}={p}" for v, p in junit_files.items()]
    argv += ["--note", "2.4.1=first", "--note", "2.4.1=second", "--output", str(out)]
    argv += ["--python", sys.executable]
    assert cli.main(argv) == 0
    text = out.read_text()
    assert table_rows(text) == EXPECTED_ROWS
    assert "- 2.4.1: first; second" in text


def test_run_scenarios_bad_junit_argument(environ: Path, tmp_path: Path) -> None:
    out = tmp_path / "compat.md"
    assert cli.main(["run-scenarios", "--from-junit", "nofile", "--output", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parametrize(
    ("classname", "name", "expected"),
    [
        ("tests.cluster.test_launcher", "test_a[torch2.4.1]", "test_launcher::test_a"),
        ("tests.cluster.test_launcher", "test_a[torch1.13.0a0]", "test_launcher::test_a"),
        ("tests.cluster.test_launcher", "test_a[torch?-x]", "test_launcher::test_a[x]"),
        ("tests.cluster.test_launcher", "test_a[torchrun-x]", "test_launcher::test_a[torchrun-x]"),
        ("", "test_a[torch2.13.0-x-y]", "test_a[x-y]"),
    ],
)
def test_scenario_names_drop_the_torch_version(classname: str, name: str, expected: str) -> None:
    assert scenarios.scenario_name(classname, name) == expected


def test_clean_env_keeps_only_the_cluster_prefix_suffix_of_the_test_variables() -> None:
    from matrix.proc import clean_env

    env = clean_env(
        {"TRJSC_CLUSTER_PREFIX_SUFFIX": "q", "TRJSC_SLOW_SCENARIOS": "1", "PET_NNODES": "2"}
    )
    assert env == {"TRJSC_CLUSTER_PREFIX_SUFFIX": "q", "OMP_NUM_THREADS": "1"}


def test_run_scenarios_names_the_commit_and_date_the_files_came_from(
    junit_files: dict[str, Path], tmp_path: Path, environ: Path
) -> None:
    """``--ran-at``: a column re-run from earlier junit files is noted with that run's commit
    and date, not this checkout's."""
    out = tmp_path / "compat.md"
    (version, xml), *_ = list(junit_files.items())
    base = ["run-scenarios", "--output", str(out), "--python", sys.executable]
    assert cli.main([*base, "--from-junit", f"{version}={xml}"]) == 0
    part = tmp_path / "part.xml"
    first_case = re.search(r"<testcase [^>]*/>", xml.read_text())
    assert first_case is not None
    part.write_text(f"<testsuites><testsuite>{first_case.group(0)}</testsuite></testsuites>")
    ran = ["--ran-at", "abc1234,2026-01-02", "--keep-previous", "--from-junit", f"{version}={part}"]
    assert cli.main([*base, *ran]) == 0
    text = out.read_text()
    assert "re-run on 2026-01-02 at commit abc1234 without the rest of its column" in text
    assert "- Commit: `abc1234`" in text and "- Date: 2026-01-02" in text


@pytest.mark.parametrize("value", ["abc1234", "xyz,2026-01-02", "abc1234,yesterday"])
def test_run_scenarios_refuses_a_bad_ran_at(
    value: str, junit_files: dict[str, Path], tmp_path: Path, environ: Path
) -> None:
    out = tmp_path / "compat.md"
    (version, xml), *_ = list(junit_files.items())
    argv = ["run-scenarios", "--output", str(out), "--ran-at", value]
    assert cli.main([*argv, "--from-junit", f"{version}={xml}"]) == 2
    assert not out.exists()


def test_a_nameless_junit_entry_names_no_scenario_and_its_old_row_is_dropped(
    tmp_path: Path,
) -> None:
    xml = tmp_path / "x.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="" time="1"/>'
        '<testcase classname="tests.cluster.test_launcher" name="test_srun_jsc_style[torch2.4.1]"/>'
        "</testsuite></testsuites>"
    )
    assert scenarios.parse_junit(xml) == {"test_launcher::test_srun_jsc_style": "passed"}
    text = scenarios.render_compat(
        {"2.4.1": {"?": "passed", "test_launcher::test_srun_jsc_style": "passed"}},
        {},
        "3.11.7",
        "abc1234",
        "2026-01-02",
    )
    assert "| `?` | pass |" in text
    assert scenarios.previous_runs(text)[0] == {
        "2.4.1": {"test_launcher::test_srun_jsc_style": "passed"}
    }
