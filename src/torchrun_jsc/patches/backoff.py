"""All versions: a node whose write of torch's rendezvous state lost waits before it tries again.

torch's dynamic rendezvous keeps one state blob per run in the store; every change (a join, a
keep-alive) is a ``compare_set`` of the whole blob, and a node whose write lost (another node's
won first) tries again at once with the state the answer carried. With N nodes joining at once
that is about N²/2 tries, each moving the blob, whose size grows with N (pytorch#117066). Here
``_BackendRendezvousStateHolder.sync`` waits after a lost write: a random time up to a window
that starts at ``first`` seconds and doubles with each loss in a row, up to ``cap`` (full
jitter); then it reads the state afresh, so the next try starts from the newest. A write that
wins starts the window over. A node that never loses never waits.
"""

from __future__ import annotations

import functools
import random
import time
from typing import Any, Callable

from ..log import logger
from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

#: ``sync`` returns False after a lost write; ``__init__``'s ``cache_duration`` is the cache
#: that ``_last_sync_time`` dates (reset here so that the next ``sync`` reads afresh).
CHECKS = (
    Check(DYNAMIC_RENDEZVOUS, "_BackendRendezvousStateHolder.sync", (("self",),)),
    Check(
        DYNAMIC_RENDEZVOUS,
        "_BackendRendezvousStateHolder.__init__",
        (("self", "backend", "settings", "cache_duration"),),
    ),
)
#: The longest wait after the first loss (seconds).
FIRST = 0.05
#: Where a state holder keeps its losses in a row.
_LOSSES = "_torchrun_jsc_lost_writes"
#: Where a state holder counts its waits (every lost write is one).
WAITS = "_torchrun_jsc_waits"


def window(losses: int, first: float, cap: float) -> float:
    """The longest wait after ``losses`` lost writes in a row (``losses`` >= 1)."""
    return min(cap, first * 2.0 ** min(losses - 1, 60))


def cap_for(keep_alive_interval: float) -> float:
    """The longest wait: half torch's keep-alive interval, so that waiting never keeps a
    node's heartbeat in the state past its expiry (``keep_alive_max_attempt`` intervals)."""
    return keep_alive_interval / 2


def install(first: float, cap: float) -> None:
    """Wait a jittered, growing time after each lost write of the rendezvous state."""
    (owner, attr, sync), _ = verified(CHECKS)
    draw: Callable[[float, float], float] = random.Random().uniform

    @functools.wraps(sync)
    def _sync(self: Any) -> Any:
        outcome = sync(self)
        if outcome is True:
            setattr(self, _LOSSES, 0)
        elif outcome is False:
            losses = getattr(self, _LOSSES, 0) + 1
            setattr(self, _LOSSES, losses)
            setattr(self, WAITS, getattr(self, WAITS, 0) + 1)
            wait = draw(0.0, window(losses, first, cap))
            logger.debug(
                "torchrun_jsc: a write of the rendezvous state lost (%d in a row); waiting %.3f s",
                losses,
                wait,
            )
            time.sleep(wait)
            self._last_sync_time = -1.0  # older than any cache: the next read goes to the store
            sync(self)  # not dirty after the loss: a read of the newest state
        return outcome

    replace(owner, attr, _sync)
