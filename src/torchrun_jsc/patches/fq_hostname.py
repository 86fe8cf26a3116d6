"""torch < 2.4: group rank 0 publishes ``agent.server.api._get_fq_hostname()`` as MASTER_ADDR.

Replaced by a function returning this node's chosen address. torch looks the name up at call
time in its module, so replacing the module attribute is enough.
"""

from __future__ import annotations

from ._common import expect, find, replace

MODULE = "torch.distributed.elastic.agent.server.api"
TARGET = "_get_fq_hostname"
ACCEPTED = ((),)


def install(address: str) -> None:
    """Make ``_get_fq_hostname()`` return ``address``."""
    owner, attr, original = find(MODULE, TARGET)
    expect(f"{MODULE}.{TARGET}", original, ACCEPTED)

    def _get_fq_hostname() -> str:
        return address

    replace(owner, attr, _get_fq_hostname)
