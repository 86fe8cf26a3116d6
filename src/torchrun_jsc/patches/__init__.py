"""Runtime patches of torch internals, one small module each.

Each module declares ``CHECKS`` (every torch internal it relies on, with the parameter lists it
accepts) and ``install(**params)``, which verifies all of them first and raises
:class:`~torchrun_jsc.errors.PatchDeclinedError` otherwise, so a torch that changed is skipped
with a warning, never crashed. :func:`install` dispatches by name; :data:`NAMES` lists them all.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional

from ..errors import PatchDeclinedError
from ._common import Check, installed, restore_all
from .params import AGENT_SIDE, REGISTRY, Params, name_of

#: Every patch module (:data:`~torchrun_jsc.patches.params.REGISTRY` holds their parameters).
NAMES = tuple(REGISTRY)

__all__ = ["AGENT_SIDE", "NAMES", "Check", "checks_of", "install", "installed", "restore_all"]


def checks_of(name: str) -> tuple[Check, ...]:
    """The ``CHECKS`` of patch ``name`` (what the fingerprints record and the tests compare)."""
    module = importlib.import_module(f"{__name__}.{name}")
    checks: tuple[Check, ...] = module.CHECKS
    return checks


def install(params: Params) -> Optional[str]:
    """Install the patch ``params`` are for; returns None, or the reason it declined."""
    module = importlib.import_module(f"{__name__}.{name_of(params)}")
    installer: Callable[..., None] = module.install
    try:
        installer(**params._asdict())
    except PatchDeclinedError as exc:
        return str(exc)
    return None
