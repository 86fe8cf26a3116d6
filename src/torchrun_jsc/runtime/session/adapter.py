"""The agent-side job watch of one torchrun_jsc agent, wired into torch: events from torch's
hooks and the watch's threads go to :func:`torchrun_jsc.runtime.watch.machine.decide`; the
actions it returns go to their owners (:mod:`.ledger` for records and the last line,
:mod:`.threads` for heartbeats, :mod:`..processes.workers` for stopping the workers, this
module for ending the process).

The ``job_watch`` patch makes the session with the settings the plan built
(:class:`~..watch.vocabulary.Config`), keeps it in this process's runtime
(:mod:`torchrun_jsc.runtime.agent`) and hooks torch's agent in two places (both stable in torch
1.13-2.15):

* after ``SimpleElasticAgent._rendezvous``: the round's members (the rendezvous state's
  participants, identified as torch identifies them) and this node's key; the first time, the
  heartbeat and watchdog threads start;
* around ``LocalElasticAgent._monitor_workers``: a final failure (no restarts left) is
  published; a stop asked for by another thread is answered with a FAILED result, the way torch
  itself ends a run from the monitor.

Heartbeats: every agent adds 1 to its counter in the rendezvous store every few seconds (its own
store connection). The agent that serves the store watches all counters
(:class:`~..watch.heartbeats.Tracker`). A member quiet for the peer timeout is lost: the watcher
records it and tells every other member to stop at its next heartbeat; where torch can go on
without the node (``--nnodes=MIN:MAX`` with restarts left), the watcher restarts its own
workers instead and torch re-forms the job without it. A node whose store operation hangs or
fails for the peer timeout has lost the rendezvous host and stops.

Recovery (``--max_restarts`` > 0, the ``recovery`` patch): an agent that has not joined a
round looks whether one formed without it (:mod:`..recovery.spares`); it is a spare then, beats, and
waits in torch's rendezvous to take a lost node's place, or ends when the job ends. Every
round after the first is a restart, said once on every node with who left and who came.

A node whose workers had all finished when the job fails elsewhere would wait in torch's exit
barrier for the barrier's timeout (300 s; torch 2.1+ sends failed nodes past it). It prints the
first failure instead and ends with 0, the code torch gives it once the barrier times out.

Stopping never waits for torch's main thread (it may be blocked in a store operation that never
returns): the workers are stopped here (SIGTERM, the grace, SIGKILL) and, if the agent has not
ended a few seconds later, the last line is printed and the process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
import time
from types import MappingProxyType
from typing import Any, Callable, List, Mapping, Optional, Tuple

from ...handover import Candidate
from .. import timing
from ..events import entry
from ..failover.relaunch import Command
from ..failover.succession import Succession
from ..processes.end import exit_now
from ..processes.output import say
from ..processes.workers import Workers
from ..records import failures
from ..recovery.rounds import Rounds
from ..recovery.spares import SpareLook
from ..requeue.sequence import Requeuing
from ..signals.signalled import Stops
from ..store.bounded import bounded
from ..store.connection import JobStore
from ..store.protocol import JobProtocol, member_key
from ..watch import machine as watch
from ..watch.vocabulary import (
    Action,
    Answer,
    Ask,
    AwaitSpares,
    Config,
    EndSpare,
    Event,
    HandOver,
    Joined,
    Leave,
    Log,
    LookForStop,
    LookUpNextHost,
    MarkCompleted,
    MarkDone,
    MonitorLooks,
    Phase,
    Publish,
    PublishOwn,
    RegisterSpare,
    Rewatch,
    Say,
    SetRestarts,
    SpareReleased,
    StartWatch,
    State,
    StopSeen,
    StopWorkers,
    TellStop,
    ToldToStop,
    WorkersEnded,
    ZeroRestarts,
)
from .chronicle import Chronicle, member_names
from .ending import Ending
from .ledger import LastLine, Ledger
from .threads import Heartbeats, Round, Watchdog, paused_for

__all__ = ["HANDLERS", "LOST_STORE", "Session"]


class Session:
    """The job watch of this agent process (one per process, in its runtime), with the
    settings the plan built."""

    def __init__(
        self,
        config: Config,
        workers: Workers,
        stops: Optional[Stops] = None,
        command: Optional[Command] = None,
    ) -> None:
        self.config = config
        #: This agent's workers (the process's registry).
        self.workers = workers
        #: The stop signals this agent got (the process's).
        self.stops = stops or Stops()
        #: How this process was started (None: not by the command; it cannot start again).
        self.command = command
        self.state = State()
        self.protocol: Optional[JobProtocol] = None
        self.ledger = Ledger(self.config.report)
        self.last_line = LastLine()
        self.beats: Optional[Heartbeats] = None
        self.watchdog: Optional[Watchdog] = None
        self.agent: Any = None
        self.me = ""
        self.members: List[str] = []
        self.group_rank: Optional[int] = None
        self.rounds: Optional[Rounds] = None
        self.spare_look: Optional[threading.Thread] = None
        #: torch's monitor interval (seconds between two looks at the workers; 5 s before 2.4).
        self.monitor_interval = 0.0
        #: Set when the agent process ends: the job watch's threads stop their store traffic.
        self.closing = threading.Event()
        self.threads: List[threading.Thread] = []
        self.lock = threading.RLock()
        #: Failover's part of the watch (its settings are the config's).
        self.succession = Succession(self)
        #: The process's end.
        self.ending = Ending(self)
        #: The job's event log, written while this agent serves the store.
        self.chronicle = Chronicle(config.events, config.hostname, self._events_handler)
        #: The requeue, when the ``requeue`` patch is installed.
        self.requeue: Optional[Requeuing] = None
        #: The rendezvous host's member key, once read (:meth:`host_member`).
        self.host_key = ""
        atexit.register(self.at_exit)

    def close(self) -> None:
        """This session no longer ends the process and its threads stop (``restore_all``: a
        second ``apply_fixes``, tests)."""
        self.disown()
        self.ending.stop_threads()

    def disown(self) -> None:
        """This session no longer ends the process; nothing else is touched (a forked child,
        which has none of its threads, and where a lock a parent's thread held stays held)."""
        atexit.unregister(self.at_exit)

    def _connect(self) -> Optional[JobProtocol]:
        """The store protocol, made once all parts are configured (at the first round)."""
        config = self.config
        if self.protocol is None and config.store_host:
            timeout = config.peer_timeout or timing.STORE_TIMEOUT
            store = JobStore(config.store_host, config.store_port, config.run_id, timeout)
            self.protocol = JobProtocol(store)
            self.ledger.protocol = self.protocol
        return self.protocol

    # ------------------------------------------------------------------ torch hooks

    def before_rendezvous(self, agent: Any, worker_group: Any) -> None:
        """Before the first round (recovery): look whether this node is a spare."""
        config = self.config
        if not (config.recovery and config.watching_peers) or self.spare_look is not None:
            return
        this = getattr(worker_group.spec.rdzv_handler, "_this_node", None)
        protocol = self._connect()
        if this is None or protocol is None or self.state.phase != Phase.WAITING:
            return
        with self.lock:
            self.agent = agent
            self.me = member_key(this)
        if self.serving:  # before it joins: the others keep a place for it (host_place)
            me = self.me
            bounded(lambda: protocol.note_host(me), timing.STORE_WAIT)
        look = SpareLook(
            protocol,
            self.me,
            lambda: self.state.phase,
            self.post,
            self.closing,
            config.beat_interval,
            self._next_hosts,
        )
        self.spare_look = threading.Thread(target=look.run, daemon=True, name="trjsc-spare")
        self.spare_look.start()

    def host_member(self) -> Optional[str]:
        """The rendezvous host's member key, for a node that keeps a place for it in each
        round (:mod:`..recovery.host_place`): None when this node is the host or does not know
        whether it is; ``""`` while the host has not said it."""
        if self.config.is_host is not False or not self.config.recovery:
            return None
        protocol = self._connect()
        if protocol is None:
            return None
        if not self.host_key:
            self.host_key = bounded(protocol.host, timing.STORE_WAIT) or ""
        return self.host_key

    def rendezvous_failed(self, error: BaseException) -> None:
        """torch's rendezvous raised ``error``: a spare whose job ended (torch closed the
        rendezvous) ends here, the way the job ended; anything else is torch's to handle."""
        previous = self.config.previous
        kind = type(error).__name__
        if previous is not None and self.state.phase == Phase.WAITING and kind in _LOST:
            say(
                f"torchrun_jsc: cannot go on: after the handover to {previous.host_name}, no"
                f" round of at least {previous.quorum} nodes formed within {previous.wait:g} s"
                f" ({kind}): the next host or too many nodes were lost too, or this node is cut"
                " off from them"
            )
            exit_now(1)
        closed = kind in ("RendezvousClosedError", "RendezvousGracefulExitError")
        if not closed:  # a store that went away in the middle of a round: the host is lost?
            self.hold_for_handover()
        protocol, phase = self.protocol, self.state.phase
        # torch ends an agent in its redundancy list this way: a spare that had not said so yet
        unsaid = kind == "RendezvousGracefulExitError" and phase == Phase.WAITING
        if not closed or protocol is None or not (phase == Phase.SPARE or unsaid):
            return
        stopped = bounded(protocol.stopped, timing.STORE_WAIT)
        self.post(SpareReleased(completed=stopped is False))

    def after_rendezvous(self, agent: Any, worker_group: Any) -> None:
        """The round's members and this node's key; starts the threads the first time."""
        self._hold_if_ending()
        with self.lock:
            self.agent = agent
            self.group_rank = worker_group.group_rank
        if self._connect() is None:
            return
        handler = worker_group.spec.rdzv_handler
        holder = getattr(handler, "_state_holder", None)
        this = getattr(handler, "_this_node", None)
        if holder is None or this is None:
            if self.config.watching_peers:
                say(
                    "torchrun_jsc: job watch off: this rendezvous handler does not expose its"
                    " participants"
                )
            with self.lock:
                self.config = self.config._replace(peer_timeout=0.0)
            return
        with self.lock:
            before = list(self.members)
            self.me = member_key(this)
            self.members = sorted(member_key(n) for n in holder.state.participants)
        self.post(self._joined(before, int(getattr(holder.state, "round", 0) or 0)))

    def _hold_if_ending(self) -> None:
        """A round that formed while this node ends the job (it may not go on, or was told to
        stop) gets no workers from it: torch's main thread waits here for the stop in
        progress to end the process, and ends it itself after that stop's bound."""
        with self.lock:
            ending = self.state.phase in (Phase.STOPPING, Phase.LEAVING)
        if not ending:
            return
        time.sleep(self.grace() + timing.EXIT_GRACE + timing.QUIESCE_WAIT)
        self.print_last_line()
        exit_now(watch.exit_code(self.state))

    def _joined(self, before: List[str], number: int) -> Joined:
        """The event for a round numbered ``number`` (torch's count) after ``before``."""
        members, protocol = list(self.members), self.protocol
        if not self.config.recovery or protocol is None:
            return Joined(size=len(members))
        if self.rounds is None:
            previous = self.config.previous
            self.rounds = Rounds(protocol, 0 if previous is None else previous.restart)
        joined = self.rounds.joined(before, members, number, self.serving)
        return joined._replace(next_hosts=self._next_hosts(members))

    def around_monitor(self, agent: Any, worker_group: Any, original: Any) -> Any:
        """``_monitor_workers``: answer a stop or restart; publish a final failure."""
        from torch.distributed.elastic.agent.server.api import WorkerState

        with self.lock:
            self.agent = agent
            self.monitor_interval = float(getattr(worker_group.spec, "monitor_interval", 0) or 0)
        if self.requeue is not None:
            self.requeue.park()
        self.look_at_pause()
        self.park_for_handover()
        asked = self._look()
        if asked == Ask.RESTART:
            return failures.stopped_result(worker_group)
        result = original(agent, worker_group)
        if result.state == WorkerState.SUCCEEDED:
            self.post(WorkersEnded(succeeded=True, final=True))
        elif result.state == WorkerState.FAILED:
            final = asked == Ask.STOP or agent._remaining_restarts == 0
            record = (
                failures.from_result(self.workers, *self._me(), worker_group, result)
                if final
                else None
            )
            self.post(WorkersEnded(succeeded=False, final=final, record=record))
        elif asked == Ask.STOP:
            return failures.stopped_result(worker_group)
        return result

    def look_at_pause(self) -> None:
        """Whether this node did not run for the peer timeout (thawed), decided now rather
        than at the watch threads' next look: before torch's monitor (it must not restart the
        workers into a round that went on without this node) and at the process's end."""
        watchdog, protocol = self.watchdog, self.protocol
        peer_timeout = self.config.peer_timeout
        if watchdog is not None and protocol is not None and peer_timeout > 0:
            paused = watchdog.paused()
            if paused >= peer_timeout:
                self.post(paused_for(protocol, paused))

    def may_close(self) -> bool:
        """Whether this agent may close torch's rendezvous at its end: not when it is out of
        the job (frozen, cut off) and the others may go on without it."""
        return not self.state.out

    def _look(self) -> Optional[Ask]:
        """What torch's monitor is told at this look (consumes the answer)."""
        with self.lock:
            self.state, actions = watch.decide(self.config, self.state, MonitorLooks())
        (answer,) = actions
        assert isinstance(answer, Answer)
        if answer.kind == Ask.STOP:
            self._zero_restarts()
        return answer.kind

    def _me(self) -> Tuple[str, Optional[int]]:
        return self.config.hostname, self.config.node_rank

    # ------------------------------------------------------------------ the process's end

    @property
    def serving(self) -> bool:
        """Whether this agent serves the store (and so watches everyone's heartbeats)."""
        is_host = self.config.is_host
        if is_host is not None:
            return is_host
        return self.group_rank == 0

    @property
    def writes_events(self) -> bool:
        """Whether this agent writes the event log: it serves the store and is not out of the
        job (a thawed host whose job went on at the next host, or one cut off with too few
        nodes while the others may go on, writes nothing more: one writer at a time)."""
        state = self.state
        return self.serving and not (state.out or state.minority)

    def grace(self) -> float:
        """Seconds the workers have between SIGTERM and SIGKILL."""
        return self.ending.grace()

    def at_exit(self) -> None:
        """The last line and the watch's threads stopped, when the interpreter ends."""
        self.ending.at_exit()

    def print_last_line(self) -> None:
        """The first failure, once, when the job failed and the report is on."""
        self.ending.print_last_line()

    def stopped_early(self, line: str, code: int) -> None:
        """A stop signal before any worker started (``line``, exit ``code``): its stop and
        the end in the event log."""
        self.ending.stopped_early(line, code)

    def stop_workers(self) -> None:
        """Stop this node's workers (a STOPPED record unless they had all ended)."""
        self.ending.stop_workers()

    # ------------------------------------------------------------------ failover

    def _next_hosts(self, members: List[str]) -> Tuple[Candidate, ...]:
        """Who would host the next round if the host were lost (failover), in order."""
        return self.succession.next_hosts(members)

    def hold_for_handover(self) -> None:
        """torch's rendezvous lost its store: wait while the watch may still hand over."""
        self.succession.hold()

    def park_for_handover(self) -> None:
        """torch's main thread while this node hands over."""
        self.succession.park()

    # ------------------------------------------------------------------ events and actions

    def post(self, event: Event) -> None:
        """Decide on ``event`` and carry out what was decided."""
        with self.lock:
            self.state, actions = watch.decide(self.config, self.state, event)
        for action in actions:
            self._carry_out(action)

    def _carry_out(self, action: Action) -> None:
        HANDLERS[type(action)](self, action)

    def _do_Say(self, action: Say) -> None:
        say(action.line)

    def _events_handler(self) -> Optional[str]:
        """The events handler torch's agent was given (``--event-log-handler``; None: none)."""
        group = getattr(self.agent, "_worker_group", None)
        handler = getattr(getattr(group, "spec", None), "event_log_handler", None)
        return handler if isinstance(handler, str) else None

    def note(self, event: str, fields: Mapping[str, Any], flush: bool = True) -> None:
        """Log ``event`` from outside the watch's decisions (the requeue, a signal); with
        ``flush``, written before the process may end (at most a few seconds)."""
        self.chronicle.write(event, fields, self.writes_events)
        if flush:
            self.chronicle.flush()

    def _do_Log(self, action: Log) -> None:
        fields = dict(action.fields)
        if action.event == entry.ROUND:  # the members by name, once they said who they are
            protocol, members = self.protocol, list(self.members)
            if protocol is not None:
                fields["members"] = functools.partial(member_names, protocol, members)
            fields["host"] = entry.node(self.config.hostname, self.config.node_rank)
        self.chronicle.write(action.event, fields, self.writes_events)

    def _do_StartWatch(self, action: StartWatch) -> None:
        self._start_threads()

    def _do_Rewatch(self, action: Rewatch) -> None:
        if self.beats is not None:
            self.beats.rewatch(action.lost)

    def _do_Publish(self, action: Publish) -> None:
        self.ledger.publish(action.record, action.local, action.unread)

    def _do_TellStop(self, action: TellStop) -> None:
        self._tell_stop(action.cause)

    def _do_PublishOwn(self, action: PublishOwn) -> None:
        if self.ledger.publish_own(action.record) and action.tell:
            self._tell_stop(action.record)

    def _do_ZeroRestarts(self, action: ZeroRestarts) -> None:
        self._zero_restarts()

    def _do_StopWorkers(self, action: StopWorkers) -> None:
        self._thread(self.ending.end_workers, "trjsc-stop")

    def _do_Leave(self, action: Leave) -> None:
        self._thread(self.ending.end_finished, "trjsc-leave")

    def _do_MarkDone(self, action: MarkDone) -> None:
        protocol, me = self.protocol, self.me
        if protocol is None or not me:
            return
        beat = bounded(lambda: protocol.mark_done(me), timing.STORE_WAIT)
        if beat is not None and beat.stop:
            self._thread(self._told_to_stop, "trjsc-stop")

    def _do_LookForStop(self, action: LookForStop) -> None:
        protocol = self.protocol
        if protocol is not None and self.me and bounded(protocol.stopped, timing.HANG):
            self.post(StopSeen())

    def _do_RegisterSpare(self, action: RegisterSpare) -> None:
        protocol, me = self.protocol, self.me
        if protocol is not None and me:
            bounded(lambda: protocol.add_spare(me), timing.STORE_WAIT)

    def _do_SetRestarts(self, action: SetRestarts) -> None:
        agent = self.agent
        if agent is not None:
            agent._remaining_restarts = min(agent._remaining_restarts, action.left)

    def _do_EndSpare(self, action: EndSpare) -> None:
        self.print_last_line()
        protocol, me = self.protocol, self.me
        if protocol is not None and me:  # the host may end once its waiting spares have
            bounded(lambda: protocol.note_spare_left(me), timing.HANG)
        exit_now(action.code)

    def _do_MarkCompleted(self, action: MarkCompleted) -> None:
        protocol = self.protocol
        if protocol is not None and not self.state.failed:
            bounded(protocol.mark_completed, timing.STORE_WAIT)

    def _do_AwaitSpares(self, action: AwaitSpares) -> None:
        protocol, beats = self.protocol, self.beats
        if protocol is None or beats is None or not self.serving:
            return
        waiting = list(beats.waiting)  # the spares that were beating at the last scan
        deadline = time.monotonic() + timing.LINGER
        while waiting and time.monotonic() < deadline:
            left = bounded(lambda: protocol.spares_left(waiting), timing.HANG)
            if left is None or len(left) == len(waiting):
                return
            time.sleep(0.2)

    def _do_LookUpNextHost(self, action: LookUpNextHost) -> None:
        self.succession.look_up(action)

    def _do_HandOver(self, action: HandOver) -> None:
        self.succession.hand_over(action)

    def _zero_restarts(self) -> None:
        agent = self.agent
        if agent is not None:
            agent._remaining_restarts = 0

    def _tell_stop(self, cause: Any) -> None:
        protocol = self.protocol
        if protocol is None:
            return
        others = [k for k in self.members if k != self.me]
        bounded(lambda: protocol.tell_stop(cause, others), timing.STORE_WAIT)

    def _told_to_stop(self) -> None:
        """This node's heartbeat came back as a stop: read why, then decide (a thawed node
        says first that it did not run: the stop is the others' answer to that)."""
        self.look_at_pause()
        protocol = self.protocol
        with self.lock:
            listening = watch.listening(self.state)
        if protocol is None or not listening:
            return
        self.post(ToldToStop(bounded(protocol.stop_cause, timing.STORE_WAIT)))

    def _thread(self, target: Any, name: str) -> None:
        threading.Thread(target=target, daemon=True, name=name).start()

    # ------------------------------------------------------------------ the watch's threads

    def _start_threads(self) -> None:
        protocol = self.protocol
        if protocol is None or self.threads:
            return
        # Connect here, in torch's main thread, before the watch threads start, so that the
        # client is not made while torch starts the workers. A precaution: a rare torch
        # 1.13 agent crash during the workers' start (CHANGELOG, known problems) was seen
        # both before and after this; its cause is not known.
        with contextlib.suppress(Exception):
            protocol.connect()
        self.watchdog = Watchdog(protocol, self.post, self.closing)
        self.beats = Heartbeats(
            protocol,
            self.config.peer_timeout,
            self.post,
            self._told_to_stop,
            self._round,
            self.closing,
        )
        for target, name in (
            (self._beat, "trjsc-beat"),
            (self.watchdog.run, "trjsc-watchdog"),
        ):
            thread = threading.Thread(target=target, daemon=True, name=name)
            self.threads.append(thread)
            thread.start()

    def _beat(self) -> None:
        protocol, beats = self.protocol, self.beats
        assert protocol is not None and beats is not None
        with contextlib.suppress(Exception):
            protocol.introduce(self.me, *self._me(), self.config.address)
            protocol.beat(self.me)  # the counter exists before a spare registers
        beats.run()

    def _round(self) -> Round:
        with self.lock:
            agent = self.agent
            restarts = agent is not None and agent._remaining_restarts > 0
            spares = () if self.rounds is None else self.rounds.spares
            return Round(
                self.me,
                list(self.members),
                self.serving,
                restarts,
                self.config.recovery,
                spares,
            )


#: Who carries out each action :func:`~..watch.machine.decide` returns, by its type (the
#: monitor's :class:`~..watch.vocabulary.Answer` is read in torch's thread instead: ``_look``).
HANDLERS: Mapping[type, Callable[[Session, Any], None]] = MappingProxyType(
    {
        Say: Session._do_Say,
        Log: Session._do_Log,
        StartWatch: Session._do_StartWatch,
        Rewatch: Session._do_Rewatch,
        Publish: Session._do_Publish,
        TellStop: Session._do_TellStop,
        PublishOwn: Session._do_PublishOwn,
        ZeroRestarts: Session._do_ZeroRestarts,
        StopWorkers: Session._do_StopWorkers,
        Leave: Session._do_Leave,
        MarkDone: Session._do_MarkDone,
        LookForStop: Session._do_LookForStop,
        RegisterSpare: Session._do_RegisterSpare,
        SetRestarts: Session._do_SetRestarts,
        EndSpare: Session._do_EndSpare,
        LookUpNextHost: Session._do_LookUpNextHost,
        HandOver: Session._do_HandOver,
        MarkCompleted: Session._do_MarkCompleted,
        AwaitSpares: Session._do_AwaitSpares,
    }
)

#: torch's error for a rendezvous store that cannot be reached.
LOST_STORE = "RendezvousConnectionError"
#: torch's errors of a rendezvous that could not reach its store or gather its nodes.
_LOST = (LOST_STORE, "RendezvousTimeoutError")
