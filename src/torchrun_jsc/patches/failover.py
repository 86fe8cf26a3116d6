"""All versions: a lost rendezvous host hands over to the next live node (with recovery).

The job watch declares the host lost after the peer timeout and starts every other agent
again at the next host (:mod:`torchrun_jsc.handover`, :mod:`torchrun_jsc.runtime.session.adapter`).
Until then torch must not end the agent: when the host's process is gone, its store's
connection fails at torch's next look (``num_nodes_waiting`` in the monitor loop, or
``next_rendezvous`` at a restart or in a spare's wait) with ``RendezvousConnectionError``, and
torch would end the agent and its workers at once. Those two calls wait for the watch's
decision instead (a bound: the peer timeout and two heartbeats); an agent that hands over is
replaced there, any other raises as before.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

from ..handover import Handover
from ..runtime.node import Node
from ..runtime.session import adapter as session
from . import _agent_hooks
from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (
    *_agent_hooks.CHECKS,
    Check(DYNAMIC_RENDEZVOUS, "DynamicRendezvousHandler.next_rendezvous", (("self",),)),
    Check(DYNAMIC_RENDEZVOUS, "DynamicRendezvousHandler.num_nodes_waiting", (("self",),)),
)


def install(
    node: Node,
    wait: float,
    host_addresses: Tuple[str, ...],
    host_rank: Optional[int],
    address: Optional[str],
    previous: Optional[Handover],
) -> None:
    """Hand over when the host is lost; hold torch's rendezvous calls until decided."""
    _agent_hooks.install()
    _agent_hooks.configure(
        node,
        failover=session.Failover(wait, tuple(host_addresses), host_rank, address, previous),
    )
    found = verified(CHECKS)[len(_agent_hooks.CHECKS) :]
    for owner, attr, original in found:
        replace(owner, attr, _holding(original))


def _holding(original: Any) -> Any:
    @functools.wraps(original)
    def _call(self: Any) -> Any:
        try:
            return original(self)
        except Exception as error:
            if type(error).__name__ == session.LOST_STORE:
                session.SESSION.hold_for_handover()
            raise

    return _call
