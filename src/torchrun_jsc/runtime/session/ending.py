"""The end of an agent process's job watch (:class:`Ending`, which the session holds): stopping
this node's workers, leaving torch's exit barrier, the last line, and the watch's threads
stopped before the interpreter ends."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from typing import List, Optional, Protocol

from .. import timing
from ..events.entry import STOP
from ..processes.end import exit_now
from ..processes.workers import Workers
from ..records import failures
from ..requeue.decision import short_name
from ..requeue.sequence import Requeuing
from ..signals.signalled import Stops
from ..store.bounded import in_flight
from ..watch.machine import exit_code
from ..watch.vocabulary import Config, Event, Exiting, State
from .chronicle import Chronicle
from .ledger import LastLine, Ledger
from .threads import Heartbeats


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


class Watch(Protocol):
    """What the process's end reads of the session (replaced as the job goes on, so read at
    each use)."""

    config: Config
    workers: Workers
    stops: Stops
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
    requeue: Optional[Requeuing]
    chronicle: Chronicle

    @property
    def serving(self) -> bool:
        """Whether this agent serves the store (and so watches everyone's heartbeats)."""

    @property
    def writes_events(self) -> bool:
        """Whether this agent writes the event log."""

    def post(self, event: Event) -> None:
        """Decide on ``event`` and carry out what was decided."""

    def look_at_pause(self) -> None:
        """Whether this node did not run for the peer timeout, decided now."""


class Ending:
    """How the process ends: built by the session with the session's view it reads."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def end_workers(self) -> None:
        """Stop this node's workers; if the agent has not ended by itself a little later (a
        blocked store operation), print the last line and end the process."""
        self.stop_workers()
        time.sleep(timing.EXIT_GRACE)
        with self.watch.lock:
            state = self.watch.state
        if not state.exiting:
            self.end_chronicle()
        self.print_last_line()
        if not state.exiting:
            os._exit(exit_code(state))

    def end_finished(self) -> None:
        """Leave torch's exit barrier: print the last line, end with 0."""
        if not self.watch.state.exiting:  # torch's main thread is still in its exit barrier
            self.end_chronicle()
        self.print_last_line()
        if not self.watch.state.exiting:
            exit_now(0)

    def stop_workers(self) -> None:
        """Stop this node's workers and publish that (a STOPPED record) unless they had all
        ended by themselves: torch's monitor then publishes their failure."""
        config = self.watch.config
        count = self.watch.workers.stop_all(self.grace())
        if count:
            self.watch.ledger.publish_own(
                failures.stopped(config.hostname, config.node_rank, count)
            )

    def at_exit(self) -> None:
        """Print the job's first failure as this agent's last line (once), when it failed; then
        stop the job watch's threads before the interpreter ends (a thread inside a store call
        while the process tears down torch's objects can abort it). A stop signal from now on
        no longer raises in the middle of it (the agent is ending; Slurm's SIGTERM after a
        requeue by another node used to end a thawed node's last line in a traceback)."""
        self.watch.stops.hold()
        try:
            # thawed: torch's main thread may end the agent before either watch thread has
            # looked again
            self.watch.look_at_pause()
            self.watch.post(Exiting())
            self.end_chronicle()  # the summary before the last line: that stays last
            self.print_last_line()
        finally:
            # silenced before the threads are stopped: a watch thread's store call that fails
            # while it is joined prints torch's C++ warning, which came after the last line
            if self.watch.state.failed and self.watch.config.report:
                silence_teardown()
            self.stop_threads()

    def end_chronicle(self) -> None:
        """The event log's end and the run's summary line (where this agent writes the log)."""
        state = self.watch.state
        if not self.watch.writes_events:
            return
        good = state.succeeded and not state.failed
        self.watch.chronicle.end(0 if good else 1, "succeeded" if good else "failed")

    def stopped_early(self, line: str, code: int) -> None:
        """A stop signal before any worker started: the stop (its cause the agent's ``line``)
        and the end (``code``) in the event log, with the run's summary line (where this agent
        writes the log)."""
        if not self.watch.writes_events:
            return
        chronicle = self.watch.chronicle
        chronicle.write(STOP, {"cause": line.removeprefix("torchrun_jsc: ")}, True)
        chronicle.end(code, "failed")

    def stop_threads(self) -> None:
        """Stop the job watch's threads (each joined within :data:`~timing.QUIESCE_WAIT`
        in all)."""
        self.watch.closing.set()
        deadline = time.monotonic() + timing.QUIESCE_WAIT
        for thread in [*self.watch.threads, *in_flight()]:
            if thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0.0))

    def print_last_line(self) -> None:
        """The first failure, once, when the job failed and the report is on."""
        if not (self.watch.state.failed and self.watch.config.report):
            return
        members, serving, me = list(self.watch.members), self.watch.serving, self.watch.me
        settle, beats = self._settle(), self.watch.beats
        beat = self.watch.config.beat_interval
        quiet = None if beats is None or not serving else functools.partial(beats.quiet, me)
        self.watch.last_line.print(
            self.watch.ledger,
            lambda: self.watch.ledger.read_all(members, serving, settle, quiet, beat),
            settle + timing.VANISHED_BEATS * beat + timing.LINGER + timing.STORE_WAIT,
        )
        # a member that did not introduce itself has its key for a name: no Slurm name
        departed = [
            short_name(m.hostname) for m in self.watch.state.departed if m.node_rank is not None
        ]
        requeue = self.watch.requeue
        if requeue is not None:
            requeue.after_failure(self.watch.last_line.seen, departed, self.watch.state.minority)

    def _settle(self) -> float:
        """How long to wait for the other nodes' records."""
        return timing.SETTLE + max(self.watch.monitor_interval, self.watch.config.beat_interval)

    def grace(self) -> float:
        """Seconds the workers have between SIGTERM and SIGKILL."""
        return self.watch.config.term_grace
