"""All versions: ``_matches_machine_hostname(host)`` decides whether a node hosts the c10d store.

torch binds the function into two modules (``rendezvous.utils`` and, at import,
``c10d_rendezvous_backend``); both are replaced. For the endpoint host the answer is the one the
plan found by matching the endpoint's addresses with this machine's; any other host is left to
torch's own function.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ._common import C10D_BACKEND, Check, replace, verified

CHECKS = tuple(
    Check(module, "_matches_machine_hostname", (("host",),))
    for module in (
        "torch.distributed.elastic.rendezvous.utils",
        C10D_BACKEND,
    )
)


def install(host: str, is_local: bool) -> None:
    """Make torch's host recognition answer ``is_local`` for ``host``."""
    for check in CHECKS:
        importlib.import_module(check.module)
    for owner, attr, original in verified(CHECKS):
        replace(owner, attr, _matcher(host, is_local, original))


def _matcher(host: str, is_local: bool, original: Callable[[str], Any]) -> Callable[[str], bool]:
    def matches(candidate: str) -> bool:
        if candidate == host:
            return is_local
        return bool(original(candidate))

    return matches
