"""How each torch release of the matrix is installed: :data:`RECIPES`, one row per range.

The releases themselves are the project's version table,
:data:`torchrun_jsc.versions.TESTED_RELEASES`; every one of them matches exactly one row here
(a unit test checks that). A version that matches no row is an error, not a guess: add a row.

How the nvidia libraries are shared (this is what keeps the matrix at ~35 GB instead of
~70 GB): PyPI only has CUDA builds of torch for Linux x86_64, and they do not import without
their nvidia-* libraries, even on a CPU-only machine. A newer set of libraries of the same CUDA
major serves older torch builds (not the reverse), so per CUDA generation one "base" venv -- the
newest torch of that generation -- gets a normal install (minus triton), and every other venv of
that generation gets torch alone plus symlinks
site-packages/nvidia/<component> -> <base>/site-packages/nvidia/<component>. The wheels find
their libraries through DT_RPATH $ORIGIN/../../nvidia/<c>/lib, so the symlinks need no
environment variable. Generations:

  cu11: base 2.0.1 (cu117)    serves 1.13.1 (cu117, same pins)
  cu12: base 2.10.0 (cu128)   serves 2.1-2.9; 2.1-2.3 need cuDNN 8, which lives in
                              shared/cudnn8 (their nvidia/cudnn link points there)
  cu13: base 2.15.0 (cu132)   serves 2.11, 2.12, 2.14 (cu130); 2.15 dropped curand, so
                              nvidia-curand 10.4 is added to it
  cpu : 2.13.0+cpu from a local wheel folder (--cpu-wheels), no nvidia at all

:mod:`.build` carries a recipe out; its docstring has the pitfalls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Optional, Tuple

from torchrun_jsc.errors import UnsupportedTorchError
from torchrun_jsc.versions import TESTED_RELEASES, TorchVersion

from .config import MatrixError

Kind = Literal["base", "torch", "cpu"]

#: What ``build`` builds without arguments: every release the project is tested with.
DEFAULT_VERSIONS: Tuple[str, ...] = TESTED_RELEASES

#: cuDNN 8 for torch 2.1-2.3, installed once into shared/cudnn8 (``--target``).
CUDNN8_PIN = "nvidia-cudnn-cu12==8.9.2.26"

_CLAUSE = re.compile(r"^(==|>=|<)(\d+\.\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class Recipe:
    """How the torch releases in ``versions`` are installed.

    ``versions``: ``"==X.Y.Z"`` or comma-separated ``">=X.Y[.Z]"``/``"<X.Y[.Z]"`` bounds.
    ``kind``: ``"base"`` a full install minus triton, owning the nvidia tree of its generation;
    ``"torch"`` torch alone plus symlinks into ``base``'s nvidia tree; ``"cpu"`` the local CPU
    wheel, no nvidia. ``cudnn8``: link nvidia/cudnn to the shared cuDNN 8 instead. ``extra``:
    more packages installed with torch (base only). ``numpy``: the numpy requirement of the
    venv (torch below 2.3 was built against numpy 1).
    """

    versions: str
    kind: Kind
    base: Optional[str] = None
    cudnn8: bool = False
    extra: Tuple[str, ...] = ()
    numpy: str = "numpy"

    def matches(self, version: TorchVersion) -> bool:
        """Whether ``version`` lies in this row's range."""
        for clause in self.versions.split(","):
            match = _CLAUSE.match(clause.strip())
            if not match:
                raise ValueError(f"bad version range {self.versions!r} in a recipe")
            op, bound = match.group(1), TorchVersion.parse(match.group(2))
            if op == "==" and version != bound:
                return False
            if op == ">=" and version < bound:
                return False
            if op == "<" and not version < bound:
                return False
        return True

    def spec(self, version: str) -> str:
        """The requirement that installs torch ``version`` this way."""
        return f"torch=={version}+cpu" if self.kind == "cpu" else f"torch=={version}"

    def describe(self) -> str:
        """One line for the build log."""
        if self.kind == "base":
            return "base (full install, no triton)" + (
                f" + {' '.join(self.extra)}" if self.extra else ""
            )
        if self.kind == "cpu":
            return "local CPU wheel"
        return f"torch only, nvidia -> {self.base}" + (" + cuDNN 8" if self.cudnn8 else "")


RECIPES: Tuple[Recipe, ...] = (
    # cu11
    Recipe(">=1.13,<2.0", "torch", base="2.0.1", numpy="numpy<2"),
    Recipe("==2.0.1", "base", numpy="numpy<2"),
    # cu12
    Recipe(">=2.1,<2.3", "torch", base="2.10.0", cudnn8=True, numpy="numpy<2"),
    Recipe(">=2.3,<2.4", "torch", base="2.10.0", cudnn8=True),
    Recipe(">=2.4,<2.10", "torch", base="2.10.0"),
    Recipe("==2.10.0", "base"),
    # cu13, and the CPU wheel among them
    Recipe(">=2.11,<2.13", "torch", base="2.15.0"),
    Recipe("==2.13.0", "cpu"),
    Recipe(">=2.14,<2.15", "torch", base="2.15.0"),
    Recipe("==2.15.0", "base", extra=("nvidia-curand==10.4.*",)),
)


def rows_for(version: str) -> Tuple[Recipe, ...]:
    """Every row whose range holds ``version`` (exactly one in a sound table)."""
    parsed = TorchVersion.parse(version)
    return tuple(row for row in RECIPES if row.matches(parsed))


def recipe_for(version: str) -> Recipe:
    """The recipe of ``version``; :class:`MatrixError` when no row (or several) holds it."""
    try:
        rows = rows_for(version)
    except (ValueError, UnsupportedTorchError) as exc:  # not a version, or a bad row
        raise MatrixError(f"torch-matrix: {exc}") from None
    if len(rows) == 1:
        return rows[0]
    where = "no row" if not rows else f"{len(rows)} rows"
    known = ", ".join(row.versions for row in RECIPES)
    raise MatrixError(
        f"torch-matrix: no recipe for torch {version} ({where} of RECIPES in "
        f"scripts/matrix/recipes.py holds it; rows: {known})"
    )
