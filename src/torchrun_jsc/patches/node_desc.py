"""torch >= 2.0: a node's rendezvous identity (``_NodeDesc.addr``) is ``local_addr`` or its FQDN.

From 2.6 the group-rank-0 node publishes that address as MASTER_ADDR. The patch passes this
node's chosen address wherever torch passes none: the same effect as ``--local_addr``.
"""

from __future__ import annotations

from typing import Any, Optional

from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (
    Check(
        DYNAMIC_RENDEZVOUS,
        "_NodeDescGenerator.generate",
        (("self", "local_addr"),),
    ),
)


def install(address: str) -> None:
    """Make ``_NodeDescGenerator.generate`` default ``local_addr`` to ``address``."""
    [(owner, attr, original)] = verified(CHECKS)

    def generate(self: Any, local_addr: Optional[str] = None) -> Any:
        return original(self, local_addr or address)

    replace(owner, attr, generate)
