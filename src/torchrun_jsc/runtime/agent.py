"""This agent process's runtime: the one object the agent-side patches share, made when the
first of them is installed (:func:`runtime`) and dropped with the patches (:func:`forget`, run
by ``restore_all``). It holds the job watch's session, which holds the rest (the process's end,
the failover's succession, the requeue)."""

from __future__ import annotations

from typing import Optional

from .session.adapter import Session
from .watch.vocabulary import Config


class Runtime:
    """What this agent process runs besides torch: the job watch (None until the ``job_watch``
    patch installs it)."""

    def __init__(self) -> None:
        self.session: Optional[Session] = None

    def watch(self, config: Config) -> Session:
        """Start this process's job watch with ``config`` (once; later calls return it)."""
        if self.session is None:
            self.session = Session(config)
        return self.session


_RUNTIME: Optional[Runtime] = None


def runtime() -> Runtime:
    """This process's runtime, made at the first call."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = Runtime()
    return _RUNTIME


def forget() -> None:
    """Drop this process's runtime and its session's exit hook (``restore_all``, tests)."""
    global _RUNTIME
    if _RUNTIME is not None and _RUNTIME.session is not None:
        _RUNTIME.session.close()
    _RUNTIME = None
