"""All versions: a lost rendezvous host hands over to the next live node (with recovery).

The job watch declares the host lost after the peer timeout and starts every other agent
again at the next host (:mod:`torchrun_jsc.handover`, :mod:`torchrun_jsc.runtime.failover`).
Until then torch must not end the agent: when the host's process is gone, its store's
connection fails at torch's next look (``num_nodes_waiting`` in the monitor loop, or
``next_rendezvous`` at a restart or in a spare's wait) with ``RendezvousConnectionError``, and
torch would end the agent and its workers at once. Those two calls wait for the watch's
decision instead (a bound: the peer timeout and two heartbeats); an agent that hands over is
replaced there, any other raises as before.
"""

from __future__ import annotations

import functools
from typing import Any

from ..runtime import agent
from ..runtime.session.adapter import LOST_STORE
from . import _agent_hooks
from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (
    *_agent_hooks.CHECKS,
    Check(DYNAMIC_RENDEZVOUS, "DynamicRendezvousHandler.next_rendezvous", (("self",),)),
    Check(DYNAMIC_RENDEZVOUS, "DynamicRendezvousHandler.num_nodes_waiting", (("self",),)),
)


def install() -> None:
    """Hold torch's rendezvous calls until the watch decided whether to hand over (the
    ``job_watch`` patch's settings say who hosts now and who would next)."""
    found = verified(CHECKS)[len(_agent_hooks.CHECKS) :]
    runtime = agent.runtime()
    for owner, attr, original in found:
        replace(owner, attr, _holding(original, runtime))


def _holding(original: Any, runtime: agent.Runtime) -> Any:
    @functools.wraps(original)
    def _call(self: Any) -> Any:
        try:
            return original(self)
        except Exception as error:
            session = runtime.session
            if type(error).__name__ == LOST_STORE and session is not None:
                session.hold_for_handover()
            raise

    return _call
