"""scripts/matrix (the torch version matrix tool): recipes, settings, the compatibility table.

No venv is built or run here; only the pure parts and the command line's argument handling.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix import cli, config, notes, recipes, scenarios  # noqa: E402
from matrix.check import plain_workaround  # noqa: E402
from matrix.config import SETTINGS, Config, MatrixError  # noqa: E402
from torchrun_jsc.versions import TESTED_RELEASES  # noqa: E402

# --------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("version", TESTED_RELEASES)
def test_every_tested_release_has_exactly_one_recipe(version: str) -> None:
    assert len(recipes.rows_for(version)) == 1


def test_default_versions_are_the_tested_releases() -> None:
    assert recipes.DEFAULT_VERSIONS == TESTED_RELEASES


@pytest.mark.parametrize("row", recipes.RECIPES, ids=lambda r: r.versions)
def test_every_base_is_built_as_a_base(row: recipes.Recipe) -> None:
    if row.kind == "torch":
        assert row.base in TESTED_RELEASES
        assert recipes.recipe_for(row.base).kind == "base"
    else:
        assert row.base is None
        assert not row.cudnn8  # only torch-only venvs link nvidia/cudnn
    if row.extra:
        assert row.kind == "base"


def test_every_row_is_used_by_a_tested_release() -> None:
    used = {recipes.recipe_for(v) for v in TESTED_RELEASES}
    assert used == set(recipes.RECIPES)


@pytest.mark.parametrize(
    ("version", "kind", "base", "cudnn8", "numpy"),
    [
        ("1.13.1", "torch", "2.0.1", False, "numpy<2"),
        ("2.0.1", "base", None, False, "numpy<2"),
        ("2.2.2", "torch", "2.10.0", True, "numpy<2"),
        ("2.3.1", "torch", "2.10.0", True, "numpy"),
        ("2.4.1", "torch", "2.10.0", False, "numpy"),
        ("2.13.0", "cpu", None, False, "numpy"),
        ("2.14.1", "torch", "2.15.0", False, "numpy"),
    ],
)
def test_recipe_rows(version: str, kind: str, base: str | None, cudnn8: bool, numpy: str) -> None:
    row = recipes.recipe_for(version)
    assert (row.kind, row.base, row.cudnn8, row.numpy) == (kind, base, cudnn8, numpy)


def test_recipe_specs() -> None:
    assert recipes.recipe_for("2.13.0").spec("2.13.0") == "torch==2.13.0+cpu"
    assert recipes.recipe_for("2.4.1").spec("2.4.1") == "torch==2.4.1"
    assert recipes.recipe_for("2.15.0").extra == ("nvidia-curand==10.4.*",)


@pytest.mark.parametrize("version", ["2.13.1", "2.16.0", "1.12.1", "2.0.0", "3.0"])
def test_a_version_without_a_row_is_a_clear_error(version: str) -> None:
    with pytest.raises(MatrixError, match=rf"no recipe for torch {version} \(no row .*recipes\.py"):
        recipes.recipe_for(version)


def test_a_version_that_is_no_version_is_a_clear_error() -> None:
    with pytest.raises(MatrixError, match="banana"):
        recipes.recipe_for("banana")


def test_a_bad_range_in_a_row_is_reported() -> None:
    row = recipes.Recipe("~=2.1", "base")
    with pytest.raises(ValueError, match="bad version range"):
        row.matches(recipes.TorchVersion.parse("2.1.0"))


def test_ranges_compare_whole_versions() -> None:
    row = recipes.Recipe(">=2.4,<2.10", "torch", base="2.10.0")
    assert row.matches(recipes.TorchVersion.parse("2.9.1+cu128"))
    assert not row.matches(recipes.TorchVersion.parse("2.10.0"))
    assert not row.matches(recipes.TorchVersion.parse("2.3.1"))


# --------------------------------------------------------------------------- check


def test_plain_workaround_comes_from_the_version_table() -> None:
    assert plain_workaround("1.13.1", (3, 11)) == (("PET_REDIRECTS", "1"), ("PET_TEE", "1"))
    assert plain_workaround("1.13.0a0", (3, 11)) == (("PET_REDIRECTS", "1"), ("PET_TEE", "1"))
    assert plain_workaround("1.13.1", (3, 10)) == ()  # the bug needs Python 3.11
    assert plain_workaround("2.13.0", (3, 11)) == ()


def test_plain_workaround_leaves_out_multi_node_bugs() -> None:
    # torch 2.5's shared-store bug only hits multi-node launches; check is --standalone
    assert plain_workaround("2.5.1", (3, 11)) == ()


# --------------------------------------------------------------------------- settings


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No TORCH_MATRIX_* variables; HOME is a temporary folder (returned)."""
    for s in SETTINGS.values():
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_defaults(environ: Path) -> None:
    cfg = Config.resolve({})
    assert cfg.home == environ / ".cache" / "torchrun_jsc-matrix"
    assert cfg.python == "python3"
    assert cfg.debian_python == Path("/usr/bin/python3")
    assert cfg.min_free_gb == 10
    assert cfg.find_links_text is None  # pip's configuration, read when needed
    assert cfg.cpu_wheels is None
    assert cfg.venv_python("2.4.1") == cfg.home / "venvs" / "2.4.1" / "bin" / "python"
    assert cfg.uv == cfg.home / "tools" / "bin" / "uv"


def test_environment_variables(environ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = environ / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("TORCH_MATRIX_HOME", "~/m")
    monkeypatch.setenv("TORCH_MATRIX_PYTHON", "/opt/py/bin/python3.12")
    monkeypatch.setenv("TORCH_MATRIX_FIND_LINKS", f"{wheels}:{environ / 'missing'}:")
    monkeypatch.setenv("TORCH_MATRIX_CPU_WHEELS", str(environ / "cpu"))
    monkeypatch.setenv("TORCH_MATRIX_DEBIAN_PYTHON", "/usr/local/bin/python3")
    monkeypatch.setenv("TORCH_MATRIX_MIN_FREE_GB", "2.5")
    cfg = Config.resolve({})
    assert cfg.home == environ / "m"
    assert cfg.python == "/opt/py/bin/python3.12"
    assert cfg.wheel_folders() == (wheels,)  # missing folders are skipped
    assert cfg.cpu_wheel_folders() == (environ / "cpu",)
    assert cfg.debian_python == Path("/usr/local/bin/python3")
    assert cfg.min_free_gb == 2.5


def test_options_win_over_environment(environ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_MATRIX_HOME", "/from/env")
    monkeypatch.setenv("TORCH_MATRIX_FIND_LINKS", str(environ))
    cfg = Config.resolve({"home": "/from/option", "find_links": ""})
    assert cfg.home == Path("/from/option")
    assert cfg.wheel_folders() == ()  # empty means none, not pip's configuration


def test_cpu_wheels_default_to_the_wheel_folders(environ: Path) -> None:
    cfg = Config.resolve({"find_links": str(environ)})
    assert cfg.cpu_wheel_folders() == (environ,)


def test_an_empty_variable_means_the_default(
    environ: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_HOME", "")
    assert Config.resolve({}).home == environ / ".cache" / "torchrun_jsc-matrix"


def test_a_bad_number_is_a_clear_error(environ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_MATRIX_MIN_FREE_GB", "lots")
    with pytest.raises(MatrixError, match="TORCH_MATRIX_MIN_FREE_GB"):
        Config.resolve({})


def test_wheel_folders_from_pip_configuration(tmp_path: Path) -> None:
    links = tmp_path / "wheels"
    links.mkdir()
    # a local simple index whose project pages link into ../../files
    files = tmp_path / "pypi" / "files"
    files.mkdir(parents=True)
    page = tmp_path / "pypi" / "simple" / "absl-py" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text('<a href="../../files/absl_py-2.5.0-py3-none-any.whl#sha256=00">x</a>\n')
    listing = "\n".join(
        [
            ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
            f":env:.find-links='{links}'",
            f"global.find-links='{links}'",
            f"global.extra-index-url='file://{tmp_path}/pypi/simple https://example.org/simple'",
            f"global.constraint='{tmp_path}/constraints.txt'",
            f"install.find-links='{tmp_path}/missing'",
        ]
    )
    assert config.pip_wheel_folders(listing) == (links, files)
    assert config.pip_wheel_folders("") == ()


def test_every_setting_is_documented() -> None:
    manuals = {
        "config.py": config.__doc__ or "",
        "cli.py": cli.__doc__ or "",
        "--help": cli.make_parser().format_help(),
        "docs/testing.md": (REPO / "docs" / "testing.md").read_text(),
    }
    for s in SETTINGS.values():
        for where, text in manuals.items():
            assert s.option in text, (s.option, where)
            assert s.env in text, (s.env, where)


def test_old_command_lines_still_parse() -> None:
    parser = cli.make_parser()
    args = parser.parse_args(
        [
            "run-scenarios",
            "2.4.1",
            "--timeout",
            "60",
            "--note",
            "2.4.1=x",
            "--pytest-args",
            "-k",
            "srun",
            "-x",
        ]
    )
    assert (args.versions, args.timeout, args.note) == (["2.4.1"], 60.0, ["2.4.1=x"])
    assert args.pytest_args == ["-k", "srun", "-x"]
    args = parser.parse_args(["run-scenarios", "--from-junit", "2.4.1=a.xml", "1.13.1=b.xml"])
    assert args.from_junit == ["2.4.1=a.xml", "1.13.1=b.xml"]
    args = parser.parse_args(["fingerprints", "--output", "/tmp/fp.json", "--no-debian"])
    assert (args.output, args.no_debian) == ("/tmp/fp.json", True)
    args = parser.parse_args(["check", "2.4.1", "--debian"])
    assert (args.versions, args.debian) == (["2.4.1"], True)


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


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


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
    assert f"- {first}: kept from the run at commit " in text
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
    assert run_notes["2.3.1"].startswith("kept from the run at commit abc1234: ")
    assert "2.6.0" not in run_notes
    assert run_notes["2.7.1"] == (
        "shared; own; re-run on 2026-02-03 at commit new9876 without the rest of its column"
        " (kept from the run at commit abc1234): test_a::test_x (pass)"
    )
    # kept again later: the kept note is not repeated, even where grouping put it second
    lines = ["- 2.0.1, 2.3.1: shared", "- 2.3.1: kept from the run at commit abc1234: x"]
    grouped = notes.parse_notes(lines, COLUMNS)
    assert grouped["2.3.1"] == "shared; kept from the run at commit abc1234: x"
    again: dict[str, str] = {}
    scenarios.merge_previous({}, again, {"2.3.1": runs["2.3.1"]}, grouped, "later", "", "")
    assert again == {"2.3.1": grouped["2.3.1"]}
