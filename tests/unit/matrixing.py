"""What the tests of scripts/matrix (test_matrix_*.py) share: a clean environment, table rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix.config import SETTINGS  # noqa: E402


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No TORCH_MATRIX_* variables; HOME is a temporary folder (returned)."""
    for s in SETTINGS.values():
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def table_rows(markdown: str) -> list[str]:
    """The lines of the markdown tables in ``markdown``."""
    return [line for line in markdown.splitlines() if line.startswith("|")]
