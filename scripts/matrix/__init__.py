"""The torch version matrix behind ``scripts/torch-matrix``: one venv per torch release.

Modules: :mod:`.cli` (the command line and its manual), :mod:`.config` (every option,
environment variable and default, and the layout under the matrix home), :mod:`.recipes` (how
each release is installed, as a table, and how the nvidia libraries are shared), :mod:`.build`,
:mod:`.check`, :mod:`.fingerprints`, :mod:`.scenarios` (one subcommand each), :mod:`.notes`
(the notes under the compatibility table, grouped by text), :mod:`.venvs` (the built venvs
and other interpreters) and :mod:`.proc` (running logged subprocesses).

``fingerprint_probe.py`` and ``gloo_check.py`` are not part of the package: they run inside
the matrix venvs, under every torch from 1.13 on, with nothing but the standard library and
torch.

The version table of this repository (:mod:`torchrun_jsc.versions`: the tested releases and
the torch bugs) is read from its ``src`` directory, which importing this package puts first
on ``sys.path``; that module imports no torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The repository this package belongs to.
REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"

if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
