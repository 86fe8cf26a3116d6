"""All versions, with recovery: the rendezvous host is a member of every round.

torch's join operation adds a node to a round that is not complete in the order the nodes
come; whoever comes once the round is full waits as a spare. A rendezvous host that came last
(it creates the store before it joins) would wait outside the round it serves, and nobody
would watch the nodes or tell the spares of the rounds. Here a node that is not the host turns
its "add me to the participants" into torch's own "look again in a second" while joining would
bring the round to its quorum without the host, up to the peer timeout and never up to torch's
own deadline for the join (:mod:`torchrun_jsc.runtime.recovery.host_place` decides). The
host's member key is in the job watch's store
(:meth:`torchrun_jsc.runtime.session.adapter.Session.host_member`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from ..errors import PatchDeclinedError
from ..runtime import agent
from ..runtime.processes.output import say
from ..runtime.recovery import host_place
from ..runtime.store.protocol import member_key
from ._common import DYNAMIC_RENDEZVOUS, Check, find, replace, verified

CHECKS = (Check(DYNAMIC_RENDEZVOUS, "_RendezvousJoinOp.__call__", (("self", "ctx", "deadline"),)),)
#: The two actions of torch's ``_Action`` that are exchanged.
_ACTIONS = ("ADD_TO_PARTICIPANTS", "SYNC")
#: Where a join operation keeps the moment its node began to hold back, and that it gave up.
_SINCE = "_torchrun_jsc_held_since"
_GAVE_UP = "_torchrun_jsc_gave_up"


def install() -> None:
    """Hold a node's join back while the round would reach its quorum without the host."""
    ((owner, attr, call),) = verified(CHECKS)
    runtime = agent.runtime()
    actions = find(DYNAMIC_RENDEZVOUS, "_Action")[2]
    if not all(hasattr(actions, name) for name in _ACTIONS):
        raise PatchDeclinedError(f"{DYNAMIC_RENDEZVOUS}._Action has no {' or '.join(_ACTIONS)}")
    add, look_again = (getattr(actions, name) for name in _ACTIONS)

    @functools.wraps(call)
    def __call__(self: Any, ctx: Any, deadline: float) -> Any:
        action = call(self, ctx, deadline)
        if action != add:
            return action
        session = runtime.session
        if session is None:
            return action
        wait = session.config.peer_timeout
        members = {member_key(node) for node in ctx.state.participants}
        now = time.monotonic()
        since = getattr(self, _SINCE, now)
        decided = host_place.place(
            member_key(ctx.node),
            session.host_member(),
            members,
            ctx.settings.min_nodes,
            now - since,
            wait,
            deadline - now,
        )
        if decided == host_place.Place.HOLD:
            setattr(self, _SINCE, since)
            return look_again
        if decided == host_place.Place.GIVE_UP and not getattr(self, _GAVE_UP, False):
            setattr(self, _GAVE_UP, True)
            say(host_place.gave_up_line(wait))
        return action

    replace(owner, attr, __call__)
