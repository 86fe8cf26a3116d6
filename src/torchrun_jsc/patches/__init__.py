"""Runtime patches of torch internals, one small module each.

Each module has ``install(**params)``; it first checks that the torch internal it replaces has
the signature it expects and raises :class:`~torchrun_jsc.errors.PatchDeclined` otherwise, so a
torch that changed is skipped with a warning, never crashed. :func:`install` dispatches by name.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional

from ..errors import PatchDeclined
from ._common import restore_all

NAMES = ("fq_hostname", "store_info_build", "node_desc", "host_matcher", "std_from_str",
         "keep_rendezvous")

__all__ = ["NAMES", "PatchDeclined", "install", "restore_all"]


def install(name: str, params: Dict[str, Any]) -> Optional[str]:
    """Install patch ``name``; returns None, or the reason it declined."""
    if name not in NAMES:
        return f"unknown patch {name!r}"
    module = importlib.import_module(f"{__name__}.{name}")
    installer: Callable[..., None] = module.install
    try:
        installer(**params)
    except PatchDeclined as exc:
        return str(exc)
    return None
