"""scripts/matrix's recipes: how each tested torch release's venv is built.

No venv is built or run here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix import recipes  # noqa: E402
from matrix.config import MatrixError  # noqa: E402
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
