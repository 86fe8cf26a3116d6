"""The end of an agent process's job watch (a part of :class:`~.session.Session`): stopping
this node's workers, leaving torch's exit barrier, the last line, and the watch's threads
stopped before the interpreter ends."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from typing import Callable, List, Optional

from ..torch_defaults import TERM_GRACE
from . import timing
from .beating import Heartbeats
from .ledger import LastLine, Ledger
from .node import Node
from .processes import workers
from .processes.end import exit_now
from .records import failures
from .requeue import sequence as requeuing
from .requeue.decision import short_name
from .signals import signalled
from .store.bounded import in_flight
from .watch import machine as watch
from .watch.vocabulary import Config, Event, Exiting, State


def silence_teardown() -> None:
    """The last line stays last: what torch's objects and threads print while the interpreter
    tears them down (a C++ ``sendBytes failed … Broken pipe`` to a store that is gone) goes
    to ``/dev/null``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)


class Ending:
    """How the process ends; :class:`~.session.Session` holds the state it reads."""

    node: Optional[Node]
    config: Config
    state: State
    ledger: Ledger
    last_line: LastLine
    beats: Optional[Heartbeats]
    members: List[str]
    me: str
    monitor_interval: float
    closing: threading.Event
    threads: List[threading.Thread]
    lock: threading.RLock
    group_rank: Optional[int]
    #: The session's: decide on an event; look whether this node did not run.
    post: Callable[[Event], None]
    _look_at_pause: Callable[[], None]

    @property
    def serving(self) -> bool:
        """Whether this agent serves the store (and so watches everyone's heartbeats)."""
        node = self.node
        if node is None:
            return False
        if node.is_host is not None:
            return node.is_host
        return self.group_rank == 0

    def _end_workers(self) -> None:
        """Stop this node's workers; if the agent has not ended by itself a little later (a
        blocked store operation), print the last line and end the process."""
        self.stop_workers()
        time.sleep(timing.EXIT_GRACE)
        self.print_last_line()
        with self.lock:
            state = self.state
        if not state.exiting:
            os._exit(watch.exit_code(state))

    def _end_finished(self) -> None:
        """Leave torch's exit barrier: print the last line, end with 0."""
        self.print_last_line()
        if not self.state.exiting:  # torch's main thread is still in its exit barrier
            exit_now(0)

    def stop_workers(self) -> None:
        """Stop this node's workers and publish that (a STOPPED record) unless they had all
        ended by themselves: torch's monitor then publishes their failure."""
        node = self.node
        count = workers.stop_all(self.grace())
        if count and node is not None:
            self.ledger.publish_own(failures.stopped(node.hostname, node.node_rank, count))

    def at_exit(self) -> None:
        """Print the job's first failure as this agent's last line (once), when it failed; then
        stop the job watch's threads before the interpreter ends (a thread inside a store call
        while the process tears down torch's objects can abort it). A stop signal from now on
        no longer raises in the middle of it (the agent is ending; Slurm's SIGTERM after a
        requeue by another node used to end a thawed node's last line in a traceback)."""
        signalled.hold()
        try:
            # thawed: torch's main thread may end the agent before either watch thread has
            # looked again
            self._look_at_pause()
            self.post(Exiting())
            self.print_last_line()
        finally:
            self._quiesce()
            if self.state.failed and self.config.report:
                silence_teardown()

    def _quiesce(self) -> None:
        self.closing.set()
        deadline = time.monotonic() + timing.QUIESCE_WAIT
        for thread in [*self.threads, *in_flight()]:
            if thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0.0))

    def print_last_line(self) -> None:
        """The first failure, once, when the job failed and the report is on."""
        if not (self.state.failed and self.config.report):
            return
        members, serving, me = list(self.members), self.serving, self.me
        settle, beats = self._settle(), self.beats
        beat = self.config.beat_interval
        quiet = None if beats is None or not serving else functools.partial(beats.quiet, me)
        self.last_line.print(
            self.ledger,
            lambda: self.ledger.read_all(members, serving, settle, quiet, beat),
            settle + timing.VANISHED_BEATS * beat + timing.LINGER + timing.STORE_WAIT,
        )
        # a member that did not introduce itself has its key for a name: no Slurm name
        departed = [short_name(m.hostname) for m in self.state.departed if m.node_rank is not None]
        requeuing.after_failure(self.last_line.seen, departed, self.state.minority)

    def _settle(self) -> float:
        """How long to wait for the other nodes' records."""
        return timing.SETTLE + max(self.monitor_interval, self.config.beat_interval)

    def grace(self) -> float:
        """Seconds the workers have between SIGTERM and SIGKILL."""
        return float(TERM_GRACE) if self.node is None else self.node.term_grace()
