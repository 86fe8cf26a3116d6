"""Runtime patches of torch internals, one small module each.

Each module declares ``CHECKS`` (every torch internal it relies on, with the parameter lists it
accepts) and ``install(**params)``, which verifies all of them first and raises
:class:`~torchrun_jsc.errors.PatchDeclinedError` otherwise, so a torch that changed is skipped
with a warning, never crashed. :func:`install` dispatches by name; :data:`NAMES` lists them all.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional

from ..errors import PatchDeclinedError
from ._common import Check, restore_all

#: The patches that act after the start (decided in :mod:`torchrun_jsc.lifecycle`).
AGENT_SIDE = (
    "worker_start",
    "forward_signals",
    "term_grace",
    "peer_watch",
    "failure_report",
    "wait_for_host",
    "rank_order",
)
#: Every patch module; the plan and the version table refer to patches by these names.
NAMES = (
    "fq_hostname",
    "store_info_build",
    "node_desc",
    "host_matcher",
    "std_from_str",
    "keep_rendezvous",
    *AGENT_SIDE,
)

__all__ = ["AGENT_SIDE", "NAMES", "Check", "checks_of", "install", "restore_all"]


def checks_of(name: str) -> tuple[Check, ...]:
    """The ``CHECKS`` of patch ``name`` (what the fingerprints record and the tests compare)."""
    module = importlib.import_module(f"{__name__}.{name}")
    checks: tuple[Check, ...] = module.CHECKS
    return checks


def install(name: str, params: Dict[str, Any]) -> Optional[str]:
    """Install patch ``name``; returns None, or the reason it declined."""
    if name not in NAMES:
        return f"unknown patch {name!r}"
    module = importlib.import_module(f"{__name__}.{name}")
    installer: Callable[..., None] = module.install
    try:
        installer(**params)
    except PatchDeclinedError as exc:
        return str(exc)
    return None
