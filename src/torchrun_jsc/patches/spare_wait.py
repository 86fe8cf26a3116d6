"""torch < 2.3: a spare times out and closes the rendezvous for every node.

An agent that comes to a complete round that is full waits in no list; at ``join_timeout``
(600 s by default) its join fails, and torch's ``launch_agent`` then closes the rendezvous, so
the next restart of every other node fails too. torch 2.3 keeps such agents in a redundancy
list without a deadline. Here the join operation's deadline is renewed while this node waits
beside a full round: it counts ``join_timeout`` from the last moment it did, so it still times
out when no round forms for it after a place opened. What ends a spare's wait is the job's end
(:mod:`torchrun_jsc.runtime.recovery.spares`). The plan installs it on torch < 2.3 (see
:mod:`torchrun_jsc.versions`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (Check(DYNAMIC_RENDEZVOUS, "_RendezvousJoinOp.__call__", (("self", "ctx", "deadline"),)),)
#: Where a join operation keeps the last moment its node waited beside a full round.
_BESIDE = "_torchrun_jsc_beside_full_round"


def install() -> None:
    """Renew a spare's join deadline while it waits beside a full round."""
    ((owner, attr, call),) = verified(CHECKS)

    @functools.wraps(call)
    def __call__(self: Any, ctx: Any, deadline: float) -> Any:
        state, settings = ctx.state, ctx.settings
        if (
            state.complete
            and ctx.node not in state.participants
            and len(state.participants) >= settings.max_nodes
        ):
            setattr(self, _BESIDE, time.monotonic())
        beside = getattr(self, _BESIDE, None)
        if beside is not None:
            deadline = max(deadline, beside + settings.timeout.join.total_seconds())
        return call(self, ctx, deadline)

    replace(owner, attr, __call__)
