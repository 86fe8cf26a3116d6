"""The built venvs of the matrix, and facts about interpreters (version, torch, smoke check)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from torchrun_jsc.versions import TorchVersion

from .config import Config, MatrixError

#: Written into a venv once it passed the smoke check at build time.
MARKER = "torch-matrix.json"
#: The smoke check: import torch and torchrun's module, print the version.
SMOKE = "import torch, torch.distributed.run; print(torch.__version__)"
#: The label of Debian's python3-torch in check and fingerprints output.
DEBIAN_LABEL = "debian-1.13"


def version_order(key: str) -> Tuple[int, Tuple[int, int, int], str]:
    """Sort key: torch versions in version order, then other labels (``debian-1.13``)."""
    if key[:1].isdigit():
        v = TorchVersion.parse(key)
        return (0, (v.major, v.minor, v.patch), key)
    return (1, (0, 0, 0), key)


def built_versions(cfg: Config) -> List[str]:
    """Versions whose venv passed the smoke check at build time (marker present)."""
    if not cfg.venvs.is_dir():
        return []
    found = [d.name for d in cfg.venvs.iterdir() if (d / MARKER).is_file()]
    return sorted(found, key=version_order)


def select(cfg: Config, versions: List[str], allow_missing: bool = False) -> List[str]:
    """``versions`` (all built ones when empty); :class:`MatrixError` for unbuilt ones."""
    built = built_versions(cfg)
    if not versions:
        return built
    missing = [v for v in versions if v not in built]
    if missing and not allow_missing:
        raise MatrixError(f"torch-matrix: not built: {' '.join(missing)} (run `build` first)")
    return [v for v in versions if v in built]


def site_packages(cfg: Config, version: str) -> Path:
    """The site-packages folder of a venv."""
    found = sorted((cfg.venv(version) / "lib").glob("python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no site-packages in {cfg.venv(version)}")
    return found[0]


def _output(argv: List[str], timeout: float = 300) -> Optional[str]:
    """stdout of ``argv`` run in the temp folder (stripped), or None when it failed."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tempfile.gettempdir(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def real_interpreter(exe: str) -> str:
    """The interpreter behind ``exe`` (resolves pyenv shims)."""
    out = _output([exe, "-c", "import sys; print(sys.executable)"])
    if not out:
        raise MatrixError(f"torch-matrix: cannot run the interpreter {exe!r} (--python)")
    return out


def python_version(exe: str) -> Optional[Tuple[int, int]]:
    """``(major, minor)`` of an interpreter, None when it does not run."""
    out = _output([exe, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    if not out:
        return None
    major, minor = out.split(".")
    return int(major), int(minor)


def full_python_version(exe: str) -> Optional[str]:
    """``platform.python_version()`` of an interpreter, None when it does not run."""
    return _output([exe, "-I", "-c", "import platform; print(platform.python_version())"])


def debian_torch(cfg: Config) -> Optional[str]:
    """torch.__version__ of Debian's python3-torch (``--debian-python``), if it imports."""
    if not cfg.debian_python.exists():
        return None
    return _output([str(cfg.debian_python), "-c", "import torch; print(torch.__version__)"])


def smoke(python: Path | str) -> Tuple[bool, str]:
    """The smoke check (:data:`SMOKE`): ``(passed, torch version or the last error line)``."""
    try:
        proc = subprocess.run(
            [str(python), "-c", SMOKE],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tempfile.gettempdir(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode == 0:
        return True, proc.stdout.strip().splitlines()[-1]
    return False, (proc.stderr.strip().splitlines() or ["?"])[-1]
