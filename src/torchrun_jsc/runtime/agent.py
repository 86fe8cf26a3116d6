"""This agent process's runtime: the one object that holds what the agent runs besides torch
(how it was started, its stop signals, its workers' registry, the orphan watcher, the job
watch's session), made at the first call of :func:`runtime` (the ``torchrun_jsc`` command's
first step, or the first agent-side patch ``apply_fixes()`` installs) and dropped with the
patches (:func:`forget`, run by ``restore_all``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .processes.orphans import Watcher
from .processes.workers import Workers
from .signals.early_stop import EarlyStop
from .signals.signalled import Stops

if TYPE_CHECKING:  # the session is loaded when the job watch starts: the command's first
    # step (the early stop, before torch is imported) stays light
    from .failover.relaunch import Command
    from .session.adapter import Session
    from .watch.vocabulary import Config


class Runtime:
    """What this agent process runs besides torch: how it was started, its stop signals (before
    and after torch's handlers), its workers and their orphan watcher, and the job watch (None
    until the ``job_watch`` patch installs it), which holds the rest."""

    def __init__(self) -> None:
        #: How this process was started (None: not by the command; it cannot start again).
        self.command: Optional[Command] = None
        self.early_stop = EarlyStop()
        self.early_stop.on_stop = self._stopped_early
        self.stops = Stops()
        self.workers = Workers()
        self.orphans = Watcher()
        self.session: Optional[Session] = None

    def watch(self, config: Config) -> Session:
        """Start this process's job watch with ``config`` (once; later calls return it)."""
        from .session.adapter import Session

        if self.session is None:
            self.session = Session(config, self.workers, self.stops, self.command)
        return self.session

    def _stopped_early(self, line: str, code: int) -> None:
        """A stop before any worker started: in the event log, where this agent writes it."""
        session = self.session
        if session is not None:
            session.stopped_early(line, code)


_RUNTIME: Optional[Runtime] = None


def runtime() -> Runtime:
    """This process's runtime, made at the first call."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = Runtime()
    return _RUNTIME


def forget() -> None:
    """Drop this process's runtime (``restore_all``, tests): its session's exit hook goes, its
    orphan watcher ends (killing what it was told of)."""
    global _RUNTIME
    if _RUNTIME is not None:
        _RUNTIME.orphans.stop()
        if _RUNTIME.session is not None:
            _RUNTIME.session.close()
    _RUNTIME = None


def drop_inherited() -> None:
    """Drop the runtime a forked child inherited, touching nothing of the parent's: the
    session's exit hook goes and the child's copy of the orphan watcher's pipe closes (the
    watcher still has the parent's); no thread is stopped and no lock taken."""
    global _RUNTIME
    if _RUNTIME is not None:
        _RUNTIME.orphans.stop()
        if _RUNTIME.session is not None:
            _RUNTIME.session.disown()
    _RUNTIME = None
