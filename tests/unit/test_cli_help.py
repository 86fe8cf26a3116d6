"""``--help``'s own section and the explain style: what each setting accepts, where the
documentation is, ``TORCHRUN_JSC_EXPLAIN=1``. No network, no launch."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from torchrun_jsc import cli
from torchrun_jsc.backend_name import FIRST, NAME
from torchrun_jsc.errors import ConfigError
from torchrun_jsc.settings.table import VARIABLES, Settings, variable

REPO = Path(__file__).resolve().parents[2]


def _help_line(text: str, name: str) -> str:
    """The line of ``name`` and its continuation lines, joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * (len(name) + 4)):
            break
        block.append(line)
    return " ".join(part.strip() for part in block)


def test_help_shows_what_every_setting_accepts_and_its_default() -> None:
    text = cli.settings_help()
    for var in VARIABLES:
        entry = _help_line(text, var.name)
        assert var.short.replace("`", "") in entry, var.name
        assert f"[{var.shown_default}]" in entry, var.name


def test_help_lines_fit_a_terminal() -> None:
    assert max(len(line) for line in cli.settings_help().splitlines()) <= 100


def test_help_says_explain_accepts_text_json_and_1() -> None:
    entry = _help_line(cli.settings_help(), "TORCHRUN_JSC_EXPLAIN")
    assert "text (or 1), json" in entry


def test_help_points_at_pages_that_exist_and_at_the_installed_readme() -> None:
    text = cli.settings_help()
    assert f"{cli.REPOSITORY}#readme" in text
    assert f"{cli.REPOSITORY}/tree/main/docs" in text
    assert (REPO / "docs").is_dir()
    assert "docs/ folder of its source" not in text
    assert "python -m torchrun_jsc.readme" in text


def test_the_installed_readme_is_the_package_description() -> None:
    from torchrun_jsc import readme

    text = readme.text()
    assert text.startswith("# torchrun_jsc\n")
    assert "<!-- settings:begin" in text


def test_the_readme_is_read_from_an_egg_info_folder_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip install .`` from a clone can leave ``src/torchrun_jsc.egg-info`` (``PKG-INFO``, no
    ``METADATA``) first on the path."""
    from torchrun_jsc import readme

    info = tmp_path / "torchrun_jsc.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: torchrun_jsc\nVersion: 9.9\n\n# torchrun_jsc\n\nbody\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert readme.text() == "# torchrun_jsc\n\nbody\n"


def test_the_readme_module_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    from torchrun_jsc import readme

    readme.main()
    assert capsys.readouterr().out.startswith("# torchrun_jsc\n")


def test_the_repository_url_has_one_value_everywhere() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib (reading pyproject.toml) needs Python 3.11")
    import tomllib

    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Homepage"] == urls["Source"] == cli.REPOSITORY
    assert set(urls) == {"Homepage", "Source", "Documentation", "Changelog", "Issues"}
    assert urls["Documentation"] == f"{cli.REPOSITORY}/tree/main/docs"
    assert urls["Changelog"] == f"{cli.REPOSITORY}/blob/main/CHANGELOG.md"
    assert urls["Issues"] == f"{cli.REPOSITORY}/issues"
    sys.path.insert(0, str(REPO / "scripts"))
    import check_docs

    assert check_docs.REPOSITORY == cli.REPOSITORY


# --------------------------------------------------------------------------- TORCHRUN_JSC_EXPLAIN=1


@pytest.mark.parametrize(("value", "style"), [("1", "text"), ("text", "text"), ("json", "json")])
def test_explain_1_is_text(value: str, style: str) -> None:
    assert Settings.from_env({"TORCHRUN_JSC_EXPLAIN": value}).explain == style
    assert cli.explain_style({"TORCHRUN_JSC_EXPLAIN": f" {value} "}) == style


@pytest.mark.parametrize("value", ["0", "2", "yaml", "TEXT", "true"])
def test_explain_other_values_are_refused_and_name_1(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"TORCHRUN_JSC_EXPLAIN": value})
    assert str(info.value).endswith(f"accepted: {variable('TORCHRUN_JSC_EXPLAIN').accepted}")
    assert "1" in variable("TORCHRUN_JSC_EXPLAIN").accepted
    assert cli.explain_style({"TORCHRUN_JSC_EXPLAIN": value}) is None


def test_explain_1_renders_the_text_explain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The whole explain path with ``1``: a standalone launch, planned and shown, not run."""
    env = {"TORCHRUN_JSC_EXPLAIN": "1"}
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(SystemExit) as info:
        cli._main(["--standalone", "--nproc_per_node=1", str(script)], env)
    out = capsys.readouterr().out
    assert info.value.code == 0, out
    assert "verdict: " in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_a_removed_current_directory_is_one_line_before_torch_is_loaded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even ``--version`` (torch's import ended in a oneMKL FATAL ERROR there)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(SystemExit) as info:
        cli._main(["--version"], {})
    assert info.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("torchrun_jsc: error: the current directory no longer exists")
    assert line.endswith("accepted: start torchrun_jsc in an existing directory")


# --------------------------------------------------------------------------- a closed pipe


def _launcher(*args: str, stdout: int) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    return subprocess.run(
        [sys.executable, "-m", "torchrun_jsc", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("args", [["--help"], ["--version", "t.py"]], ids=["help", "version"])
def test_a_reader_that_went_away_ends_it_quietly_with_141(args: List[str]) -> None:
    """``torchrun_jsc --help | head -n 1`` whose ``head`` has already gone: a real pipe whose
    read end is closed before anything is written, so every write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        out = _launcher(*args, stdout=write)
    finally:
        os.close(write)
    assert out.stderr == b"", out.stderr.decode(errors="replace")
    assert out.returncode == cli.PIPE_CLOSED == 141


def test_help_through_head_prints_its_first_line_and_no_traceback() -> None:
    script = (
        f"set -o pipefail; {shlex.quote(sys.executable)} -m torchrun_jsc --help 2>&1 | head -n 1"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert out.stdout.startswith("usage: "), out.stdout
    assert out.returncode in (0, cli.PIPE_CLOSED), out
    assert "Traceback" not in out.stdout + out.stderr


def test_help_names_the_rendezvous_backend_for_other_launchers() -> None:
    text = " ".join(cli.settings_help().split())
    assert f"--rdzv-backend={NAME}: read as c10d here" in text
    assert f"(torch >= {FIRST[0]}.{FIRST[1]})" in text
