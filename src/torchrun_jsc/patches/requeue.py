"""All versions, opt-in (``TORCHRUN_JSC_REQUEUE=1``): the job goes back into Slurm's queue
after Slurm's warning signal before the time limit, and after a failure it cannot recover from
inside its allocation, without the nodes it lost (:mod:`torchrun_jsc.runtime.requeue.sequence`).

The warning signal gets a handler of its own, in front of the one that passes it on to the
workers (``forward_signals``, which stays as it is): it marks the requeue pending, and torch's
monitor (hooked as for the job watch) then waits for the requeue instead of restarting or
ending the workers."""

from __future__ import annotations

import signal
from typing import Any, Callable

from ..errors import PatchDeclinedError
from ..runtime import agent
from ..runtime.requeue.decision import Budget
from ..runtime.requeue.sequence import Requeuing
from ..runtime.session.adapter import Session
from . import _agent_hooks
from ._common import on_restore, verified

CHECKS = _agent_hooks.CHECKS


def install(budget: Budget) -> None:
    """Requeue the job on ``budget.signal`` and after a failure it cannot recover from."""
    verified(CHECKS)
    session = agent.runtime().session
    if session is None:
        raise PatchDeclinedError("the job watch it is part of is not installed")
    requeue = Requeuing(budget, session, grace=session.config.term_grace)
    session.requeue = requeue
    number = int(getattr(signal, budget.signal))
    before = signal.getsignal(number)

    def handler(signum: int, frame: Any) -> None:
        requeue.signalled()
        if callable(before):
            before(signum, frame)

    signal.signal(number, handler)
    on_restore(_undo(number, before, session))


def _undo(number: int, before: Any, session: Session) -> Callable[[], None]:
    def undo() -> None:
        signal.signal(number, before)
        session.requeue = None

    return undo
