"""scripts/matrix's check: what plain torchrun needs on each release, from the version table."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from matrix.check import plain_workaround  # noqa: E402

# --------------------------------------------------------------------------- check


def test_plain_workaround_comes_from_the_version_table() -> None:
    assert plain_workaround("1.13.1", (3, 11)) == (("PET_REDIRECTS", "1"), ("PET_TEE", "1"))
    assert plain_workaround("1.13.0a0", (3, 11)) == (("PET_REDIRECTS", "1"), ("PET_TEE", "1"))
    assert plain_workaround("1.13.1", (3, 10)) == ()  # the bug needs Python 3.11
    assert plain_workaround("2.13.0", (3, 11)) == ()


def test_plain_workaround_leaves_out_multi_node_bugs() -> None:
    # torch 2.5's shared-store bug only hits multi-node launches; check is --standalone
    assert plain_workaround("2.5.1", (3, 11)) == ()
