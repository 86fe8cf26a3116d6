"""All versions: a stop by a signal ends the agent with one line. Only the first SIGTERM,
SIGINT, SIGHUP or SIGQUIT raises torch's ``SignalException``; later ones, while torch stops
the workers, are noted and do not interrupt that shutdown
(:mod:`torchrun_jsc.runtime.signals.signalled`).
None raises once the job is being requeued: the requeue brings Slurm's SIGTERM, and the agent
ends by itself (:mod:`torchrun_jsc.runtime.requeue.sequence`).
"""

from __future__ import annotations

import functools
from typing import Any

from ..runtime import agent
from ._common import PROCESSES, Check, replace, verified

CHECKS = (
    Check(
        PROCESSES,
        "_terminate_process_handler",
        (("signum", "frame"),),
    ),
)


def install() -> None:
    """Wrap torch's termination handler (registered by name each time workers start)."""
    [(owner, attr, original)] = verified(CHECKS)
    stops = agent.runtime().stops

    @functools.wraps(original)
    def _terminate_process_handler(signum: int, frame: Any) -> None:
        if stops.held():
            return  # the agent ends by itself (a requeue)
        if stops.note(signum):
            original(signum, frame)  # raises SignalException: torch stops the workers

    replace(owner, attr, _terminate_process_handler)
