"""All versions, opt-in (``TORCHRUN_JSC_REQUEUE=1``): the job goes back into Slurm's queue
after Slurm's warning signal before the time limit, and after a failure it cannot recover from
inside its allocation, without the nodes it lost (:mod:`torchrun_jsc.runtime.requeue.sequence`).

The warning signal gets a handler of its own, in front of the one that passes it on to the
workers (``forward_signals``, which stays as it is): it marks the requeue pending, and torch's
monitor (hooked as for the job watch) then waits for the requeue instead of restarting or
ending the workers."""

from __future__ import annotations

import signal
from typing import Any, Callable, List, Optional

from ..runtime.node import Node
from ..runtime.requeue import sequence as requeuing
from ..runtime.requeue.decision import Budget
from ..runtime.session import adapter as session
from ..runtime.store.protocol import JobProtocol
from ..runtime.watch.vocabulary import Event
from . import _agent_hooks
from ._common import on_restore, verified

CHECKS = _agent_hooks.CHECKS


def install(node: Node, budget: Budget) -> None:
    """Requeue the job on ``budget.signal`` and after a failure it cannot recover from."""
    verified(CHECKS)
    _agent_hooks.install()
    _agent_hooks.configure(node)
    requeue = requeuing.Requeuing(budget, _Current(), grace=node.term_grace())
    requeuing.REQUEUE = requeue
    number = int(getattr(signal, budget.signal))
    before = signal.getsignal(number)

    def handler(signum: int, frame: Any) -> None:
        requeue.signalled()
        if callable(before):
            before(signum, frame)

    signal.signal(number, handler)
    on_restore(_undo(number, before))


class _Current:
    """This process's job watch as the requeue sees it (the session of the moment)."""

    @property
    def protocol(self) -> Optional[JobProtocol]:
        return session.SESSION.protocol

    @property
    def members(self) -> List[str]:
        return list(session.SESSION.members)

    @property
    def serving(self) -> bool:
        return session.SESSION.serving

    def post(self, event: Event) -> None:
        session.SESSION.post(event)


def _undo(number: int, before: Any) -> Callable[[], None]:
    def undo() -> None:
        signal.signal(number, before)
        requeuing.REQUEUE = None

    return undo
