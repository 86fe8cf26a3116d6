"""scripts/matrix's settings (options, TORCH_MATRIX_* variables, pip's configuration) and its
command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix import cli, config  # noqa: E402
from matrix.config import SETTINGS, Config, MatrixError  # noqa: E402

from . import matrixing  # noqa: E402

#: The shared fixture (tests/unit/matrixing.py).
environ = matrixing.environ


# --------------------------------------------------------------------------- settings


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
