"""Carrying out a requeue (``TORCHRUN_JSC_REQUEUE=1``); the decisions are :mod:`.decision`'s.

**The warning signal** (Slurm's, before the time limit; SIGUSR1 by default). The agent's
handler marks the requeue pending at once, in torch's main thread: from its next look on,
torch's monitor waits here (:meth:`Requeuing.park`), so that workers that end now are neither
restarted nor reported, nor passed through torch's exit barrier. Then, in a thread:

1. the loop guard (every node decides it alike); the node serving the rendezvous store asks
   Slurm whether the job can be requeued and writes the verdict, the others read it. No: torch's
   monitor goes on as without the setting.
2. the workers have the grace to save a checkpoint and end; those still running then are
   stopped (SIGTERM, the grace, SIGKILL).
3. every member says it is ready; the serving node waits for all of them, requeues the job,
   and writes the outcome; every node prints it and ends (0 when requeued). Slurm's SIGTERM,
   which the requeue brings, is ignored from here on
   (:meth:`~torchrun_jsc.runtime.signals.signalled.Stops.hold`): its SIGKILL after ``KillWait`` is
   the bound.

**After a failure** the job cannot recover from (the first failure printed): the serving node
applies the guard, requeues the job with the nodes the job watch declared lost excluded, and
writes the outcome; the other nodes print it when it comes in time. When the serving node is
the one lost, node ranks 1-3 requeue in its place without it, one after another, each asking
Slurm first whether one before it did (Slurm's restart count of the job is the record).

Every wait here has a bound (:mod:`torchrun_jsc.runtime.timing`); torch's monitor waits at most
their sum.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Any, Callable, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar

from ...torch_defaults import TERM_GRACE
from .. import timing
from ..events.entry import REQUEUE
from ..processes.end import exit_now
from ..processes.output import say
from ..processes.workers import Workers
from ..records.report import Record
from ..signals.signalled import Stops
from ..store.bounded import bounded
from ..store.protocol import JobProtocol
from ..watch.vocabulary import Event
from ..watch.vocabulary import Requeuing as RequeuingEvent
from .decision import (
    STAND_INS,
    WARNING,
    Budget,
    cause_of,
    commands,
    done_line,
    excluded,
    host_lost,
    job_facts,
    left_out,
    lost_itself,
    lost_names,
    no_line,
    nodes_gone,
    refusal,
    requeued_already,
    signal_cause,
    stand_in_delay,
    verdict,
)

T = TypeVar("T")

#: Runs one ``scontrol`` command: its exit code and what it printed.
Runner = Callable[[Sequence[str]], Tuple[int, str]]


class Job(Protocol):
    """What the requeue needs of the job watch (the session)."""

    @property
    def protocol(self) -> Optional[JobProtocol]: ...
    @property
    def members(self) -> List[str]: ...
    @property
    def serving(self) -> bool: ...
    @property
    def workers(self) -> Workers: ...
    @property
    def stops(self) -> Stops: ...
    def post(self, event: Event) -> None: ...
    def note(self, event: str, fields: Mapping[str, Any]) -> None: ...


def scontrol(command: Sequence[str]) -> Tuple[int, str]:
    """Run ``command`` with a bound; its exit code and output (124 when Slurm did not answer).
    It ignores SIGTERM: a requeue makes Slurm stop every process of the job step, this one's
    next command among them (SIGKILL after ``KillWait`` still ends it)."""
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            timeout=timing.SCONTROL_WAIT,
            check=False,
            preexec_fn=_ignore_term,
        )
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timing.SCONTROL_WAIT:g} s"
    except OSError as error:
        return 127, str(error)
    return done.returncode, (done.stdout + done.stderr).strip()


#: Why a node that does not requeue has nothing to print.
_NOT_RUN = (
    "this node itself did not run for the peer timeout (frozen or suspended): the other nodes"
    " requeue the job or went on without it"
)
_MINORITY = (
    "this node's group was too small to go on, and Slurm does not say that the lost nodes are"
    " down: they may be training on without it"
)
_NO_WORD = (
    "the rendezvous host, which requeues the job, did not say in time that it did (was it lost?)"
)


def _ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Requeuing:
    """The requeue of this agent's job: ``budget`` from the plan, ``job`` the session."""

    def __init__(
        self,
        budget: Budget,
        job: Job,
        grace: float = TERM_GRACE,
        run: Runner = scontrol,
        end: Optional[Callable[[int], None]] = None,
    ) -> None:
        self.budget = budget
        self.job = job
        self.term_grace = float(grace)
        self.run = run
        self.end = end or exit_now
        self.started = time.monotonic()
        self.pending = threading.Event()
        self.released = threading.Event()
        self._once = threading.Lock()
        self._failure_begun = False
        self._failure_done = threading.Event()

    # ------------------------------------------------------------------ the warning signal

    def signalled(self) -> None:
        """The warning signal came (called in the signal handler)."""
        if self.pending.is_set():
            return
        self.pending.set()
        threading.Thread(target=self._warning, daemon=True, name="trjsc-requeue").start()

    def bound(self) -> float:
        """The longest the warning's sequence may take."""
        return (
            timing.REQUEUE_VERDICT_WAIT
            + self.budget.grace
            + self.term_grace
            + timing.REQUEUE_READY_WAIT
            + timing.REQUEUE_OUTCOME_WAIT
        )

    def park(self) -> None:
        """torch's monitor, while a requeue is pending: wait until it is declined (the
        process ends here when it is done), at most :meth:`bound` seconds."""
        if self.pending.is_set():
            self.released.wait(self.bound())

    def _warning(self) -> None:
        try:
            ok, why_not = self._agree()
            if not ok:
                say(no_line(why_not))
                return
            self._drain()
            self._ready_and_requeue()
        finally:
            self.released.set()

    def _agree(self) -> Tuple[bool, str]:
        """The guard, then the serving node's word on whether Slurm can requeue the job."""
        guard = verdict(self.budget, time.monotonic() - self.started, WARNING)
        if not guard.requeue:
            return False, guard.why_not
        protocol = self.job.protocol
        if protocol is None:
            return self._can_requeue()
        if self.job.serving:
            ok, line = self._can_requeue()
            said = bounded(lambda: protocol.set_requeue_verdict(ok, line), timing.STORE_WAIT)
            return said if said is not None else (ok, line)
        found = _poll(protocol.requeue_verdict, timing.REQUEUE_VERDICT_WAIT)
        if found is None:
            return False, (
                "the rendezvous host did not say within"
                f" {timing.REQUEUE_VERDICT_WAIT:g} s whether the job can be requeued"
            )
        return found

    def _can_requeue(self) -> Tuple[bool, str]:
        code, output = self.run(("scontrol", "-o", "show", "job", self.budget.job))
        facts = job_facts(output) if code == 0 else None
        if facts is not None and (facts.batch is False or facts.requeue is False):
            return False, refusal(facts, (), "")
        return True, ""

    def _drain(self) -> None:
        """The workers' grace to save and end; then the ones still running are stopped."""
        budget = self.budget
        say(
            f"torchrun_jsc: {signal_cause(budget)}: the workers have {budget.grace:g} s to save a"
            f" checkpoint and end (TORCHRUN_JSC_REQUEUE_GRACE); then job {budget.job} is"
            " requeued"
        )
        deadline = time.monotonic() + budget.grace
        while self.job.workers.live() and time.monotonic() < deadline:
            time.sleep(0.2)
        running = len(self.job.workers.live())
        if running:
            say(
                f"torchrun_jsc: {running} worker(s) still running after"
                f" {budget.grace:g} s: stopping them"
            )
            self.job.workers.stop_all(self.term_grace)

    def _ready_and_requeue(self) -> None:
        self.job.stops.hold()  # the requeue brings Slurm's SIGTERM
        protocol, job = self.job.protocol, self.job
        job.post(RequeuingEvent())  # the host's end is not a lost host any more
        member = bool(job.members)
        if protocol is not None and member:
            bounded(protocol.requeue_ready, timing.STORE_WAIT)
        if protocol is None or job.serving:
            if protocol is not None:
                wanted = max(len(job.members), 1)
                _poll(
                    lambda: protocol.requeue_readies() >= wanted or None,
                    timing.REQUEUE_READY_WAIT + self.budget.grace + self.term_grace,
                )
            ok, line = self._requeue(signal_cause(self.budget), ())
            self._note(signal_cause(self.budget), (), ok, line)
            if protocol is not None:
                self._tell(protocol, ok, line, len(job.members) - 1)
        else:
            found = _poll(protocol.requeue_outcome, self.bound())
            ok, line = found or (False, no_line(_NO_WORD))
            if found is not None:
                bounded(protocol.requeue_told, timing.STORE_WAIT)
        say(line)
        self.end(0 if ok else 1)

    def _tell(self, protocol: JobProtocol, ok: bool, line: str, readers: int) -> None:
        """Write the outcome and wait (at most :data:`~torchrun_jsc.runtime.timing.LINGER`) until
        ``readers`` nodes have read it: the store ends with this process."""
        bounded(lambda: protocol.set_requeue_outcome(ok, line), timing.STORE_WAIT)
        _poll(lambda: protocol.requeue_told(0) >= readers or None, timing.LINGER)

    # ------------------------------------------------------------------ after a failure

    def after_failure(
        self, records: Sequence[Record], departed: Sequence[str] = (), minority: bool = False
    ) -> None:
        """The job failed and cannot go on here (its first failure is printed): requeue it
        without the lost nodes (the serving node does), or say why not. ``departed``: the
        Slurm names of the nodes that left this process's earlier rounds; ``minority``: this
        node's group was too small to go on (the others may be training on)."""
        if self.pending.is_set():
            return  # the warning's requeue ends this process
        with self._once:
            first, self._failure_begun = not self._failure_begun, True
        if not first:  # the process must not end before the first caller has said it
            self._failure_done.wait(timing.REQUEUE_OUTCOME_WAIT + 2 * timing.STORE_WAIT)
            return
        try:
            self._after_failure(records, departed, minority)
        finally:
            self._failure_done.set()

    def _after_failure(
        self, records: Sequence[Record], departed: Sequence[str], minority: bool
    ) -> None:
        self.job.stops.hold()
        ran = time.monotonic() - self.started
        guard = verdict(self.budget, ran, cause_of(records), records)
        if not guard.requeue:
            say(no_line(guard.why_not))
            return
        protocol, job = self.job.protocol, self.job
        if lost_itself(records):  # a thawed host must not requeue a job that went on
            say(no_line(_NOT_RUN))
            return
        if minority and not self._gone(lost_names(records)):
            say(no_line(_MINORITY))
            return
        if host_lost(records):
            self._stand_in(departed)
            return
        if protocol is not None and not job.serving:
            found = _poll(protocol.requeue_outcome, timing.REQUEUE_OUTCOME_WAIT)
            if found is not None:
                bounded(protocol.requeue_told, timing.STORE_WAIT)
            say(found[1] if found else no_line(_NO_WORD))
            return
        lost = lost_names(records)  # members of this round: they read no word
        cause = "a failure it could not recover from"
        excluded = left_out(self.budget, departed, lost)
        ok, line = self._requeue(cause, excluded)
        self._note(cause, excluded, ok, line)
        say(line)
        if protocol is not None:
            self._tell(protocol, ok, line, len(job.members) - 1 - len(lost))

    def _stand_in(self, departed: Sequence[str]) -> None:
        """The rendezvous host, which requeues, is lost: node ranks 1-3 requeue in its place,
        one after another, each first asking Slurm whether one before it did."""
        budget = self.budget
        delay = stand_in_delay(budget)
        ranks = "-".join(str(r) for r in (STAND_INS[0], STAND_INS[-1]))
        if delay is None:
            say(
                f"torchrun_jsc: the rendezvous host, which requeues the job, was lost: node"
                f" ranks {ranks} requeue it in its place"
            )
            return
        time.sleep(delay)
        lost = left_out(budget, departed, [budget.host] if budget.host else [])
        cause = "a failure it could not recover from (the rendezvous host lost)"
        say(self._requeue(cause, lost)[1])

    def _note(self, cause: str, excluded: Sequence[str], ok: bool, line: str) -> None:
        """The requeue in the job's event log (the rendezvous host's)."""
        fields = {
            "cause": cause,
            "excluded": list(excluded),
            "done": ok,
            "line": line.removeprefix("torchrun_jsc: "),
        }
        self.job.note(REQUEUE, fields)

    # ------------------------------------------------------------------ Slurm

    def _gone(self, names: Sequence[str]) -> bool:
        """Whether Slurm says every one of the nodes ``names`` is down or not responding."""
        if not names:
            return False
        code, output = self.run(("scontrol", "-o", "show", "node", ",".join(names)))
        return code == 0 and nodes_gone(output, names)

    def _requeue(self, cause: str, lost: Sequence[str]) -> Tuple[bool, str]:
        """Requeue the job (excluding ``lost``): whether Slurm did, and the line. Not when
        Slurm counts a requeue of this run already: the job may be running its next run (a
        node that was frozen, and thawed after another node requeued, must not requeue that)."""
        budget = self.budget
        code, output = self.run(("scontrol", "-o", "show", "job", budget.job))
        facts = job_facts(output) if code == 0 else None
        if requeued_already(budget, facts):
            return True, (
                f"torchrun_jsc: requeue {budget.done + 1} of {budget.most}: job {budget.job}"
                " was requeued already (by another node)"
            )
        exclude = excluded(facts.excluded if facts else "", lost) if lost else ""
        for command in commands(budget.job, exclude):
            code, output = self.run(command)
            if code != 0:
                return False, no_line(refusal(facts, command, output))
        return True, done_line(budget, cause, lost)


#: Seconds between two looks at the store while waiting for another node's word: every node
#: looks, and on thousands of nodes they all ask the one store.
POLL_EVERY = 0.5


def _poll(look: Callable[[], Optional[T]], seconds: float) -> Optional[T]:
    """``look()`` every :data:`POLL_EVERY` seconds (each call bounded) until it answers (not
    None), at most ``seconds``; None otherwise."""
    deadline = time.monotonic() + seconds
    while True:
        found: Optional[T] = bounded(look, timing.STORE_WAIT)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_EVERY)
