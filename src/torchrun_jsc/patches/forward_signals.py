"""All versions: SIGUSR1/SIGUSR2 sent to the agent are passed on to every worker, and
training goes on (torch has no handler for them, so they would kill the agent and orphan the
workers). Relies on the workers that ``worker_start`` registers."""

from __future__ import annotations

import signal
from typing import Any, Callable, Sequence

from ..log import logger
from ..runtime import workers
from . import worker_start
from ._common import on_restore, verified

CHECKS = worker_start.CHECKS


def install(signals: Sequence[str]) -> None:
    """Pass ``signals`` (names, e.g. ``SIGUSR1``) on to the workers."""
    verified(CHECKS)
    for name in signals:
        number = getattr(signal, name)
        on_restore(_restorer(number, signal.signal(number, _forward)))


def _restorer(number: int, before: Any) -> Callable[[], None]:
    def restore() -> None:
        signal.signal(number, before)

    return restore


def _forward(signum: int, frame: Any) -> None:
    sent = workers.signal_all(signum)
    logger.warning("torchrun_jsc: passed %s on to %d worker(s)", signal.Signals(signum).name, sent)
