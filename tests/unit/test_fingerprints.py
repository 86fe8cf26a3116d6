"""Signature fingerprints of the torch internals torchrun_jsc patches, per torch release.

``data/fingerprints.json`` is written by ``scripts/torch-matrix fingerprints`` (facts, no code).
These tests fail, naming version and function, when a release's internal no longer has a
signature the patch used for that release accepts, and when the installed torch disagrees with
its recorded fingerprint.
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from torchrun_jsc.patches import _common
from torchrun_jsc.versions import (
    PATCH_HOST_MATCHER,
    PATCH_KEEP_RENDEZVOUS,
    PATCH_STD_FROM_STR,
    TorchVersion,
    strategy_for,
)

DATA = json.loads((Path(__file__).parent / "data" / "fingerprints.json").read_text())


def used_patches(version: TorchVersion) -> List[str]:
    """Every patch some setting can make torchrun_jsc install on ``version``."""
    strategy = strategy_for(version)
    names = [PATCH_HOST_MATCHER, strategy.advertise_patch]
    if version.key < (2, 0):
        names.append(PATCH_STD_FROM_STR)
    if strategy.restart_closes_rendezvous:
        names.append(PATCH_KEEP_RENDEZVOUS)
    return names


def fingerprint(entry: Dict[str, Any], module: str, target: str) -> Optional[Tuple[str, ...]]:
    """Parameter names as the patch sees them (``cls`` first for a classmethod)."""
    found = entry["targets"].get(f"{module}:{target}")
    if not found or not found["exists"]:
        return None
    names = tuple(p["name"] for p in found["parameters"])
    return ("cls", *names) if found["kind"] == "classmethod" else names


def targets(name: str) -> List[Tuple[str, str, Tuple[Tuple[str, ...], ...]]]:
    module = importlib.import_module(f"torchrun_jsc.patches.{name}")
    checks = getattr(module, "CHECKS", None)
    if checks:
        return [(m, t, tuple(tuple(a) for a in acc)) for m, t, acc in checks]
    modules = getattr(module, "MODULES", None) or (module.MODULE,)
    return [(m, module.TARGET, tuple(tuple(a) for a in module.ACCEPTED)) for m in modules]


CASES = [
    (key, name)
    for key, entry in DATA.items()
    for name in used_patches(TorchVersion.parse(entry["torch_version"]))
]


def test_every_matrix_release_is_recorded() -> None:
    for release in ("1.13.1", "2.0.1", "2.4.1", "2.5.1", "2.6.0", "2.13.0", "2.15.0"):
        assert release in DATA


@pytest.mark.parametrize(("key", "patch"), CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_patch_accepts_the_recorded_signature(key: str, patch: str) -> None:
    for module, target, accepted in targets(patch):
        found = fingerprint(DATA[key], module, target)
        assert found is not None, f"torch {key}: {module}.{target} does not exist"
        assert found in accepted, (
            f"torch {key}: {module}.{target} has parameters {found}; patch {patch} accepts "
            f"{accepted}"
        )


def test_installed_torch_matches_its_fingerprint() -> None:
    torch = pytest.importorskip("torch")
    version = TorchVersion.parse(torch.__version__)
    key = next((k for k, e in DATA.items() if e["torch_version"] == torch.__version__), None)
    if key is None:
        pytest.skip(f"no fingerprint recorded for torch {torch.__version__}")
    checked = 0
    for patch in used_patches(version):
        for module, target, _ in targets(patch):
            _, _, raw = _common.find(module, target)
            live = _common.parameters(raw)
            assert fingerprint(DATA[key], module, target) == live, f"{module}.{target}"
            checked += 1
    assert checked >= 3


def test_fingerprints_are_facts_not_code() -> None:
    text = json.dumps(DATA)
    assert "def " not in text and "return " not in text
    assert inspect.isfunction(used_patches)
