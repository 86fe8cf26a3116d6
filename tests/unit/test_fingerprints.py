"""Signature fingerprints of the torch internals torchrun_jsc patches, per torch release.

``data/fingerprints.json`` is written by ``scripts/torch-matrix fingerprints`` (facts, no code).
These tests fail, naming version and function, when a release's internal no longer has a
signature the patch used for that release accepts, and when the installed torch disagrees with
its recorded fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from torchrun_jsc import lifecycle, patches
from torchrun_jsc.patches import _common
from torchrun_jsc.patches.params import name_of_type
from torchrun_jsc.versions import (
    TESTED_RELEASES,
    TorchVersion,
    bugs_for,
    strategy_for,
)

DATA = json.loads((Path(__file__).parent / "data" / "fingerprints.json").read_text())


def python_of(entry: Dict[str, Any]) -> Tuple[int, int]:
    major, minor = entry["python_version"].split(".")[:2]
    return int(major), int(minor)


def used_patches(version: TorchVersion, python: Tuple[int, int]) -> List[str]:
    """Every patch some setting can make torchrun_jsc install on ``version``."""
    names = ["host_matcher", name_of_type(strategy_for(version).advertise_patch)]
    names += [name_of_type(bug.patch) for bug in bugs_for(version, python) if bug.patch]
    return names + list(lifecycle.PATCHES)


def fingerprint(entry: Dict[str, Any], module: str, target: str) -> Optional[Tuple[str, ...]]:
    """Parameter names as the patch sees them (``cls`` first for a classmethod)."""
    found = entry["targets"].get(f"{module}:{target}")
    if not found or not found["exists"]:
        return None
    names = tuple(p["name"] for p in found["parameters"])
    return ("cls", *names) if found["kind"] == "classmethod" else names


CASES = [
    (key, name)
    for key, entry in DATA.items()
    for name in used_patches(TorchVersion.parse(entry["torch_version"]), python_of(entry))
]


def test_every_tested_release_is_recorded() -> None:
    assert sorted(TESTED_RELEASES) == sorted(k for k in DATA if not k.startswith("debian"))


@pytest.mark.parametrize(("key", "patch"), CASES, ids=[f"{k}-{p}" for k, p in CASES])
def test_patch_accepts_the_recorded_signature(key: str, patch: str) -> None:
    for check in patches.checks_of(patch):
        found = fingerprint(DATA[key], check.module, check.target)
        assert found is not None, f"torch {key}: {check.module}.{check.target} does not exist"
        assert found in check.accepted, (
            f"torch {key}: {check.module}.{check.target} has parameters {found}; patch {patch} "
            f"accepts {check.accepted}"
        )


def test_installed_torch_matches_its_fingerprint() -> None:
    torch = pytest.importorskip("torch")
    import sys

    version = TorchVersion.parse(torch.__version__)
    key = next((k for k, e in DATA.items() if e["torch_version"] == torch.__version__), None)
    assert key is not None, f"no fingerprint recorded for the installed torch {torch.__version__}"
    checked = 0
    for patch in used_patches(version, sys.version_info[:2]):
        for check in patches.checks_of(patch):
            _, _, raw = _common.find(check.module, check.target)
            live = _common.parameters(raw)
            assert fingerprint(DATA[key], check.module, check.target) == live, check
            checked += 1
    assert checked >= 3


def test_fingerprints_hold_no_source_text() -> None:
    """Facts only: no value of any recorded target is a line of code."""

    def strings(value: object) -> List[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return []

    texts = strings(DATA)
    assert texts, "the data file is not empty"
    assert not [t for t in texts if "\n" in t or t.lstrip().startswith(("def ", "return "))]
