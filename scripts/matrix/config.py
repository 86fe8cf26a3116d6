"""Every setting of torch-matrix: an option, else an environment variable, else a default.

option            environment variable         default
----------------  ---------------------------  ------------------------------------------------
--home            TORCH_MATRIX_HOME            ~/.cache/torchrun_jsc-matrix
--python          TORCH_MATRIX_PYTHON          python3 (through pyenv shims to the interpreter)
--find-links      TORCH_MATRIX_FIND_LINKS      the local package folders of pip's configuration
--cpu-wheels      TORCH_MATRIX_CPU_WHEELS      the --find-links folders
--debian-python   TORCH_MATRIX_DEBIAN_PYTHON   /usr/bin/python3
--min-free-gb     TORCH_MATRIX_MIN_FREE_GB     10

* ``--home``: where the venvs and everything else of the matrix live (layout below). ``~`` is
  expanded.
* ``--python``: the interpreter every venv is made from (``build``), and whose version
  ``run-scenarios`` writes into the table.
* ``--find-links``: colon-separated folders of wheels that uv may install from (uv reads no
  pip configuration, so torch-matrix passes these on); folders that do not exist are skipped
  and an empty value means none. The default is what pip is configured with
  (``python3 -m pip config list``, run with the interpreter running torch-matrix): every
  ``find-links`` entry that is a local folder, and for every local (``file://``)
  ``index-url``/``extra-index-url`` the folder its project pages link into.
* ``--cpu-wheels``: the folder holding ``torch-VERSION+cpu-*.whl`` for releases whose recipe
  is a local CPU wheel.
* ``--debian-python``: the interpreter of Debian's ``python3-torch`` (torch 1.13.0a0), which
  ``check --debian`` and ``fingerprints`` use as ``debian-1.13`` when it imports torch.
* ``--min-free-gb``: ``build`` installs nothing while the home's file system has less free.

Layout under the home::

  tools/            venv holding uv (installed with pip, PIP_CONSTRAINT=/dev/null because a
                    machine's pip configuration may cap torch; uv ignores pip configuration)
  uv-cache/         uv's cache; on the same file system as the venvs so that uv hardlinks
  venvs/<version>/  one venv per torch release
  shared/cudnn8/    nvidia-cudnn-cu12 8.9.2.26 (--target) for torch 2.1-2.3
  excludes/         per-version lists of packages uv must not install
  logs/             uv, torchrun and pytest output per step
  scenarios/        junit XML of the last run-scenarios per version
  build.tsv         one line per build step: time, version, result, seconds, disk
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Tuple


class MatrixError(Exception):
    """A problem the user has to fix (an unknown version, a venv not built); no traceback."""


@dataclass(frozen=True)
class Setting:
    """One setting: its option, environment variable and documented default."""

    option: str
    env: str
    metavar: str
    default: str
    help: str


SETTINGS = {
    "home": Setting(
        "--home",
        "TORCH_MATRIX_HOME",
        "DIR",
        "~/.cache/torchrun_jsc-matrix",
        "where the venvs, uv, its cache and the logs live",
    ),
    "python": Setting(
        "--python",
        "TORCH_MATRIX_PYTHON",
        "EXE",
        "python3",
        "the interpreter the venvs are made from; run-scenarios names its version",
    ),
    "find_links": Setting(
        "--find-links",
        "TORCH_MATRIX_FIND_LINKS",
        "DIRS",
        "the local folders of pip's configuration (find-links, file:// indexes)",
        "colon-separated local wheel folders for uv; empty for none",
    ),
    "cpu_wheels": Setting(
        "--cpu-wheels",
        "TORCH_MATRIX_CPU_WHEELS",
        "DIR",
        "the --find-links folders",
        "the folder holding torch-VERSION+cpu-*.whl for the CPU-wheel recipes",
    ),
    "debian_python": Setting(
        "--debian-python",
        "TORCH_MATRIX_DEBIAN_PYTHON",
        "EXE",
        "/usr/bin/python3",
        "the interpreter of Debian's python3-torch (label debian-1.13)",
    ),
    "min_free_gb": Setting(
        "--min-free-gb",
        "TORCH_MATRIX_MIN_FREE_GB",
        "GB",
        "10",
        "do not install while less is free on the home's file system",
    ),
}


def setting(key: str, given: Optional[str], environ: Mapping[str, str]) -> Optional[str]:
    """The option if given, else the environment variable if set, else None."""
    if given is not None:
        return given
    return environ.get(SETTINGS[key].env)


@dataclass
class Config:
    """The resolved settings and the paths under the home."""

    home: Path
    python: str
    debian_python: Path
    min_free_gb: float
    #: None: read pip's configuration when first needed.
    find_links_text: Optional[str] = None
    cpu_wheels: Optional[Path] = None
    _wheel_folders: Optional[Tuple[Path, ...]] = field(default=None, repr=False)

    @classmethod
    def resolve(
        cls, options: Mapping[str, Optional[str]], environ: Mapping[str, str] = os.environ
    ) -> Config:
        """Settings from ``options`` (key -> value or None), then ``environ``, then defaults."""

        def get(key: str) -> str:
            value = setting(key, options.get(key), environ)
            return value if value else SETTINGS[key].default

        cpu = setting("cpu_wheels", options.get("cpu_wheels"), environ)
        min_free = get("min_free_gb")
        try:
            min_free_gb = float(min_free)
        except ValueError:
            raise MatrixError(f"--min-free-gb / TORCH_MATRIX_MIN_FREE_GB: {min_free!r}") from None
        return cls(
            home=Path(get("home")).expanduser(),
            python=get("python"),
            debian_python=Path(get("debian_python")).expanduser(),
            min_free_gb=min_free_gb,
            find_links_text=setting("find_links", options.get("find_links"), environ),
            cpu_wheels=Path(cpu).expanduser() if cpu else None,
        )

    # --- paths under the home ---------------------------------------------------------------

    @property
    def tools(self) -> Path:
        return self.home / "tools"

    @property
    def uv(self) -> Path:
        return self.tools / "bin" / "uv"

    @property
    def uv_cache(self) -> Path:
        return self.home / "uv-cache"

    @property
    def venvs(self) -> Path:
        return self.home / "venvs"

    @property
    def cudnn8(self) -> Path:
        return self.home / "shared" / "cudnn8"

    @property
    def excludes(self) -> Path:
        return self.home / "excludes"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def scenarios(self) -> Path:
        return self.home / "scenarios"

    @property
    def build_log(self) -> Path:
        return self.home / "build.tsv"

    def venv(self, version: str) -> Path:
        return self.venvs / version

    def venv_python(self, version: str) -> Path:
        return self.venv(version) / "bin" / "python"

    # --- wheel folders ----------------------------------------------------------------------

    def wheel_folders(self) -> Tuple[Path, ...]:
        """The local wheel folders for uv (``--find-links``), existing ones only."""
        if self._wheel_folders is None:
            if self.find_links_text is not None:
                found = [Path(p).expanduser() for p in self.find_links_text.split(":") if p]
            else:
                found = list(pip_wheel_folders(pip_config_list()))
            self._wheel_folders = _unique_dirs(found)
        return self._wheel_folders

    def cpu_wheel_folders(self) -> Tuple[Path, ...]:
        """Where a CPU-wheel recipe looks for its wheel."""
        return (self.cpu_wheels,) if self.cpu_wheels is not None else self.wheel_folders()


def _unique_dirs(paths: list[Path]) -> Tuple[Path, ...]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir() and path not in out:
            out.append(path)
    return tuple(out)


def pip_config_list() -> str:
    """The output of ``python -m pip config list`` ("" when pip cannot tell)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def pip_wheel_folders(config_list: str) -> Tuple[Path, ...]:
    """Local wheel folders named in ``pip config list`` output (lines ``key='value'``).

    Every ``find-links`` entry that is a local folder, then for every local ``file://`` index
    (``index-url``, ``extra-index-url``) the folder its project pages link into. Missing
    folders are left out.
    """
    links: list[Path] = []
    indexes: list[Path] = []
    for line in config_list.splitlines():
        match = re.match(r"^\s*([^=\s]+)=(.*)$", line)
        if not match:
            continue
        name = match.group(1).rsplit(".", 1)[-1]
        try:
            value = ast.literal_eval(match.group(2))
        except (ValueError, SyntaxError):
            value = match.group(2)
        for entry in str(value).split():
            path = _local_path(entry)
            if path is None:
                continue
            if name == "find-links":
                links.append(path)
            elif name in ("index-url", "extra-index-url"):
                folder = index_wheel_folder(path)
                if folder is not None:
                    indexes.append(folder)
    return _unique_dirs(links + indexes)


def _local_path(entry: str) -> Optional[Path]:
    """A local path for ``/dir`` or ``file:///dir``; None for remote URLs."""
    if entry.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlparse(entry).path))
    if "://" in entry:
        return None
    return Path(entry).expanduser()


def index_wheel_folder(index: Path) -> Optional[Path]:
    """The folder a local simple index (``<index>/<project>/index.html``) links its files in."""
    try:
        pages = sorted(index.glob("*/index.html"))
    except OSError:
        return None
    for page in pages[:1]:
        try:
            text = page.read_text(errors="replace")
        except OSError:
            return None
        match = re.search(r'href="([^"#]+)', text)
        if match and "://" not in match.group(1):
            target = page.parent / urllib.request.url2pathname(match.group(1))
            folder = Path(os.path.normpath(target)).parent
            return folder if folder.is_dir() else None
    return None
