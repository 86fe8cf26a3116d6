"""All versions: ``_matches_machine_hostname(host)`` decides whether a node hosts the c10d store.

torch binds the function into two modules (``rendezvous.utils`` and, at import,
``c10d_rendezvous_backend``); both are replaced. For the endpoint host the answer is the one the
plan found by matching the endpoint's addresses with this machine's; any other host is left to
torch's own function.
"""

from __future__ import annotations

import importlib

from ._common import expect, find, replace

MODULES = (
    "torch.distributed.elastic.rendezvous.utils",
    "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
)
TARGET = "_matches_machine_hostname"
ACCEPTED = (("host",),)


def install(host: str, is_local: bool) -> None:
    """Make torch's host recognition answer ``is_local`` for ``host``."""
    found = []
    for module in MODULES:
        importlib.import_module(module)
        owner, attr, original = find(module, TARGET)
        expect(f"{module}.{TARGET}", original, ACCEPTED)
        found.append((owner, attr, original))
    for owner, attr, original in found:

        def matches(candidate: str, _original=original) -> bool:  # type: ignore[no-untyped-def]
            if candidate == host:
                return is_local
            return bool(_original(candidate))

        replace(owner, attr, matches)
