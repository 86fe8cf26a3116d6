"""``torch-matrix check``: a 2-process ``torchrun --standalone`` gloo all_reduce per venv.

Each venv runs ``python -m torch.distributed.run --standalone --nproc_per_node=2
scripts/matrix/gloo_check.py`` (plain torchrun, not torchrun_jsc) in a clean environment; it
passes when both ranks print ``MATRIX-OK``. torch <= 2.0 uses the fixed port 29400 for
``--standalone``, so a failed run is tried once more after 5 s.

A torch bug that breaks plain torchrun is avoided the way a user of plain torchrun would: the
``plain_workaround`` variables of its row in :data:`torchrun_jsc.versions.TORCH_BUGS` are set
(for torch 1.13 on Python 3.11, ``PET_REDIRECTS=1 PET_TEE=1``: ``Std.from_str("0")`` returns
None there because iterating an ``enum.Flag`` skips the 0 member, so torchrun's defaults
``--redirects 0 --tee 0`` crash). Bugs only multi-node launches meet are left out, since a
``--standalone`` launch is a single node.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import List, Tuple

from torchrun_jsc.versions import TorchVersion, bugs_for

from .config import Config
from .proc import clean_env, run_logged, tail
from .venvs import DEBIAN_LABEL, debian_torch, python_version, select

GLOO_CHECK = Path(__file__).resolve().parent / "gloo_check.py"


def plain_workaround(torch_version: str, python: Tuple[int, int]) -> Tuple[Tuple[str, str], ...]:
    """The variables a single-node plain torchrun needs on this torch and Python."""
    pairs: List[Tuple[str, str]] = []
    for bug in bugs_for(TorchVersion.parse(torch_version), python):
        if not bug.multi_node_only:
            pairs.extend(bug.plain_workaround)
    return tuple(pairs)


def torchrun_check(python: str, torch_version: str, logfile: Path) -> Tuple[bool, float, str]:
    """Run the check with ``python`` (torch ``torch_version``): (passed, seconds, message)."""
    env = clean_env()
    found = python_version(python)
    workaround = plain_workaround(torch_version, found) if found else ()
    env.update(workaround)
    note = f" ({' '.join(f'{k}={v}' for k, v in workaround)})" if workaround else ""
    cmd = [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(GLOO_CHECK),
    ]
    t0 = time.monotonic()
    rc, oks = 0, 0
    for attempt in (1, 2):  # torch <= 2.0 uses the fixed port 29400 for --standalone
        logfile.write_text("")
        rc = run_logged(cmd, logfile, env=env, timeout=300, cwd=Path(tempfile.gettempdir()))
        oks = logfile.read_text(errors="replace").count("MATRIX-OK")
        if rc == 0 and oks == 2:
            return True, time.monotonic() - t0, f"2/2 ranks OK{note}"
        if attempt == 1:
            time.sleep(5)
    return False, time.monotonic() - t0, f"rc={rc}, {oks}/2 ranks OK{note}"


def run_check(cfg: Config, versions: List[str], debian: bool) -> int:
    """The ``check`` subcommand: one PASS/FAIL line per venv; 1 if any failed."""
    todo = [(v, v, str(cfg.venv_python(v))) for v in select(cfg, versions)]
    if debian:
        found = debian_torch(cfg)
        if found:
            todo.append((DEBIAN_LABEL, found, str(cfg.debian_python)))
        else:
            print(f"skip\t{DEBIAN_LABEL}\tno torch at {cfg.debian_python}", flush=True)
    cfg.logs.mkdir(parents=True, exist_ok=True)
    failures = 0
    for label, torch_version, py in todo:
        logfile = cfg.logs / f"check-{label}.log"
        ok, dt, msg = torchrun_check(py, torch_version, logfile)
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'}\t{label}\t{dt:.1f}s\t{msg}", flush=True)
        if not ok:
            print(tail(logfile, 10), flush=True)
    return 1 if failures else 0
