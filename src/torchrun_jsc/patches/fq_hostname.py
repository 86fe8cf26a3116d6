"""torch < 2.4: group rank 0 publishes ``agent.server.api._get_fq_hostname()`` as MASTER_ADDR.

Replaced by a function returning this node's chosen address. torch looks the name up at call
time in its module, so replacing the module attribute is enough.
"""

from __future__ import annotations

from ._common import AGENT, Check, replace, verified

CHECKS = (Check(AGENT, "_get_fq_hostname", ((),)),)


def install(address: str) -> None:
    """Make ``_get_fq_hostname()`` return ``address``."""
    [(owner, attr, _)] = verified(CHECKS)

    def _get_fq_hostname() -> str:
        return address

    replace(owner, attr, _get_fq_hostname)
