"""``torch-matrix fingerprints``: facts about the patched torch internals, per torch release.

Runs ``fingerprint_probe.py`` (standard library only) with every venv's interpreter and with
Debian's python3-torch (as ``debian-1.13``), and merges the results into a JSON file, by default
``tests/unit/data/fingerprints.json``, keyed by ``X.Y.Z``. The probe reads its targets from the
``CHECKS`` of this repository's patch modules; ``tests/unit/test_fingerprints.py`` checks the
patches against the file.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from . import REPO, SRC
from .config import Config
from .proc import clean_env
from .venvs import DEBIAN_LABEL, debian_torch, select, version_order

PROBE = Path(__file__).resolve().parent / "fingerprint_probe.py"
#: Where ``fingerprints`` writes by default.
FINGERPRINTS = REPO / "tests" / "unit" / "data" / "fingerprints.json"


def probe(python: str) -> Dict[str, Any]:
    """The probe's facts for one interpreter."""
    proc = subprocess.run(
        [python, "-I", str(PROBE), str(SRC)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tempfile.gettempdir(),
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.strip()
        raise RuntimeError(err.splitlines()[-1] if err else "probe failed")
    facts: Dict[str, Any] = json.loads(proc.stdout)
    return facts


def merged(data: Dict[str, Any]) -> str:
    """The file's text: versions in version order, then ``debian-1.13``."""
    ordered = {k: data[k] for k in sorted(data, key=version_order)}
    return json.dumps(ordered, indent=1, sort_keys=False) + "\n"


def run_fingerprints(cfg: Config, versions: List[str], output: Path, debian: bool) -> int:
    """The ``fingerprints`` subcommand; 1 if a probe failed (the others are still written)."""
    data: Dict[str, Any] = json.loads(output.read_text()) if output.exists() else {}
    todo = [(v, str(cfg.venv_python(v))) for v in select(cfg, versions)]
    if debian and debian_torch(cfg):
        todo.append((DEBIAN_LABEL, str(cfg.debian_python)))
    failures = 0
    for label, py in todo:
        try:
            facts = probe(py)
        except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            print(f"FAIL\t{label}\t{exc}", flush=True)
            failures += 1
            continue
        key = label if label == DEBIAN_LABEL else facts["torch_version"].split("+")[0]
        data[key] = facts
        targets = facts["targets"]
        n = sum(t["exists"] for t in targets.values())
        print(f"ok\t{key}\t{facts['torch_version']}\t{n}/{len(targets)} targets exist", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(merged(data))
    print(f"wrote {output} ({len(data)} versions)")
    return 1 if failures else 0
