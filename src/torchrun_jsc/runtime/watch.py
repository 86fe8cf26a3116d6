"""The job watch of one agent as a state machine: its states, the events that move it, and
:func:`decide`, which is pure (state and event in; the next state and the actions to carry out
out). :mod:`torchrun_jsc.runtime.session` feeds it events from torch's hooks and the watch's
threads and hands the actions to their owners.

The phases of a node::

    WAITING ──joined──▶ TRAINING ──workers finished──▶ FINISHED
                          │  ▲                           │
           member lost,   │  └──joined── RESTARTING      │ job failed elsewhere
           elastic with   └──────────────▶ (answer)      ▼ (or the host hangs)
           restarts left                              LEAVING  (end now, exit 0)
    TRAINING ──its own workers failed, no restarts left──▶ FAILED
    TRAINING, RESTARTING, FAILED ──member lost / told to stop / host silent──▶ STOPPING
                                        (stop the workers; end the process, exit 1)

FAILED still listens: torch 2.1+ ends such an agent itself, but before 2.1 it waits in torch's
exit barrier for every node, and a lost node or host would keep it there for 300 s.

``failed`` (the job failed: the last line names its first failure), ``succeeded`` (this node's
workers all ended well, which decides its exit code) and ``exiting`` (the process's end has
begun) hold across phases; ``answer`` is what torch's monitor is to be told at its next look.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple, Optional, Tuple, Union

from . import heartbeats
from .report import FAILED, LOST, Record, describe, node_name


class Phase(Enum):
    """Where this node's part of the job stands."""

    WAITING = "waiting for the first rendezvous round"
    TRAINING = "workers running"
    RESTARTING = "restarting the workers without a lost node"
    FINISHED = "workers finished; in torch's exit barrier"
    FAILED = "workers failed, no restarts left"
    STOPPING = "the job failed: stopping this node's workers"
    LEAVING = "the job failed after this node's workers finished: ending"


#: Phases in which this node is ending the job already: news of a lost member, a stop or a
#: silent host changes nothing more.
_ENDED = (Phase.STOPPING, Phase.LEAVING)


def listening(state: State) -> bool:
    """Whether news that ends the job (a lost member, a stop, a silent host) still matters."""
    return state.phase not in _ENDED and not state.exiting


class Ask(Enum):
    """What torch's monitor is told at its next look."""

    STOP = "stop the workers, no restarts"
    RESTART = "restart the workers (torch re-forms the round)"


class Config(NamedTuple):
    """What the plan switched on for this node, and who it is."""

    hostname: str = ""
    node_rank: Optional[int] = None
    endpoint: str = ""
    #: Seconds a member may be quiet before it is lost; 0: peers are not watched.
    peer_timeout: float = 0.0
    #: Whether the first-failure report is on (records in the store, the last line).
    report: bool = False
    #: ``--nnodes=MIN:MAX``: torch can go on without a lost node.
    elastic: bool = False

    @property
    def watching_peers(self) -> bool:
        """Whether heartbeats are on."""
        return self.peer_timeout > 0


class State(NamedTuple):
    """The watch's state (immutable; :func:`decide` returns the next one)."""

    phase: Phase = Phase.WAITING
    answer: Optional[Ask] = None
    failed: bool = False
    succeeded: bool = False
    exiting: bool = False


# ---------------------------------------------------------------------------- events


class Joined(NamedTuple):
    """A rendezvous round formed with this node in it."""


class MembersLost(NamedTuple):
    """The watcher found members quiet for the peer timeout: their store ``keys`` (in key
    order), the first one's ``hostname`` and ``node_rank``, how long it has been ``quiet`` and
    when it was last heard from (wall clock); whether torch has restarts left."""

    keys: Tuple[str, ...]
    hostname: str
    node_rank: Optional[int]
    quiet: float
    last_seen: float
    restarts_left: bool


class ToldToStop(NamedTuple):
    """This node's heartbeat came back as a stop (``cause``: the stop record, if readable)."""

    cause: Optional[Record] = None


class StoreQuiet(NamedTuple):
    """The watchdog's look at the store connection: the operation in flight has run for
    ``stuck`` seconds, the last one that succeeded ended ``silent`` seconds ago; ``paused``:
    how much longer than its period the watchdog's last look is ago (this node's processes
    were stopped, e.g. frozen, when that reaches the peer timeout)."""

    stuck: float
    silent: float
    now: float
    paused: float = 0.0


class MonitorLooks(NamedTuple):
    """torch's monitor is about to look at the workers."""


class WorkersEnded(NamedTuple):
    """torch's monitor found the workers ended: ``succeeded``, or failed (``record``: this
    node's account); ``final``: no restarts are left."""

    succeeded: bool
    final: bool
    record: Optional[Record] = None


class StopSeen(NamedTuple):
    """At the process's end, the store says another node stopped the job."""


class Exiting(NamedTuple):
    """The agent process ends."""


Event = Union[
    Joined, MembersLost, ToldToStop, StoreQuiet, MonitorLooks, WorkersEnded, StopSeen, Exiting
]


# ---------------------------------------------------------------------------- actions


class Say(NamedTuple):
    """Print ``line`` on this node's stderr."""

    line: str


class StartWatch(NamedTuple):
    """Start the heartbeat and watchdog threads."""


class Rewatch(NamedTuple):
    """Watch the round's members without ``lost`` from now on."""

    lost: Tuple[str, ...]


class Publish(NamedTuple):
    """Keep ``record`` (a lost node or host) and, unless ``local``, write it to the store;
    ``unread``: store keys of members that will not read the records."""

    record: Record
    local: bool = False
    unread: Tuple[str, ...] = ()


class TellStop(NamedTuple):
    """Tell every other member to stop, ``cause`` being why."""

    cause: Record


class PublishOwn(NamedTuple):
    """This node's account of its workers (one per node); ``tell``: if it became this node's
    record, tell every other member to stop."""

    record: Record
    tell: bool = False


class ZeroRestarts(NamedTuple):
    """torch's agent must not restart its workers any more."""


class StopWorkers(NamedTuple):
    """Stop this node's workers; end the process if the agent does not end by itself."""


class Leave(NamedTuple):
    """Print the last line and end the process with 0, out of torch's exit barrier."""


class MarkDone(NamedTuple):
    """Tell the watcher that this node's workers are done (its answer may be a stop)."""


class Answer(NamedTuple):
    """What torch's monitor is told (None: it looks as usual)."""

    kind: Optional[Ask]


class LookForStop(NamedTuple):
    """Look in the store whether another node stopped the job (posts :class:`StopSeen`)."""


Action = Union[
    Say,
    StartWatch,
    Rewatch,
    Publish,
    TellStop,
    PublishOwn,
    ZeroRestarts,
    StopWorkers,
    Leave,
    MarkDone,
    Answer,
    LookForStop,
]
Decision = Tuple[State, Tuple[Action, ...]]


# ---------------------------------------------------------------------------- decide


def decide(config: Config, state: State, event: Event) -> Decision:
    """The next state and the actions for ``event``."""
    if isinstance(event, Joined):
        return _joined(config, state)
    if isinstance(event, MonitorLooks):
        return state._replace(answer=None), (Answer(state.answer),)
    if isinstance(event, WorkersEnded):
        return _workers_ended(config, state, event)
    if isinstance(event, Exiting):
        return _exiting(config, state)
    if isinstance(event, StopSeen):
        return state._replace(failed=True), ()
    if not listening(state):
        return state, ()
    if isinstance(event, MembersLost):
        return _members_lost(config, state, event)
    if isinstance(event, ToldToStop):
        why = "another node stopped the job" if event.cause is None else describe(event.cause)
        return _end_job(state, f"torchrun_jsc: {why}", "stopping this node's workers")
    return _store_quiet(config, state, event)


def _joined(config: Config, state: State) -> Decision:
    if state.phase == Phase.WAITING:
        start: Tuple[Action, ...] = (StartWatch(),) if config.watching_peers else ()
        return state._replace(phase=Phase.TRAINING), start
    if state.phase == Phase.RESTARTING:
        return state._replace(phase=Phase.TRAINING), ()
    return state, ()


def _members_lost(config: Config, state: State, event: MembersLost) -> Decision:
    hostname, node_rank = event.hostname, event.node_rank
    others = "" if len(event.keys) == 1 else f" (and {len(event.keys) - 1} more)"
    what = hostname if node_rank is None else node_name(hostname, node_rank)
    lost = (
        f"{what} has not been heard from for {event.quiet:.0f} s"
        f" (TORCHRUN_JSC_PEER_TIMEOUT={config.peer_timeout:g}){others}"
    )
    if config.elastic and event.restarts_left and not state.succeeded:
        restart = Say(f"torchrun_jsc: {lost}; restarting the workers without it")
        new = state._replace(phase=Phase.RESTARTING, answer=Ask.RESTART)
        return new, (restart, Rewatch(event.keys))
    record = Record(kind=LOST, hostname=hostname, node_rank=node_rank, time=event.last_seen)
    return _end_job(
        state,
        f"torchrun_jsc: {lost}",
        "stopping the job",
        (Publish(record, unread=event.keys), TellStop(record)),
    )


def _store_quiet(config: Config, state: State, event: StoreQuiet) -> Decision:
    timeout = config.peer_timeout
    if event.paused >= timeout:
        return _resumed(config, state, event)
    if not heartbeats.host_lost(event.stuck, event.silent, timeout, state.succeeded):
        return state, ()
    line = (
        f"torchrun_jsc: the rendezvous host {config.endpoint} has not answered for"
        f" {event.silent:.0f} s (TORCHRUN_JSC_PEER_TIMEOUT={timeout:g})"
    )
    what = f"the rendezvous host {config.endpoint}"
    return _lost_here(config, state, event.now - event.silent, what, line)


def _resumed(config: Config, state: State, event: StoreQuiet) -> Decision:
    """This node did not run for the peer timeout (frozen, suspended): the others have stopped
    the job or gone on without it; whatever its store connection says now, that is why."""
    line = (
        f"torchrun_jsc: this node did not run for {event.paused:.0f} s (frozen or suspended;"
        f" TORCHRUN_JSC_PEER_TIMEOUT={config.peer_timeout:g}): the other nodes have stopped the"
        " job or gone on without it"
    )
    what = f"this node, {node_name(config.hostname, config.node_rank)},"
    return _lost_here(config, state, event.now - event.paused, what, line)


def _lost_here(config: Config, state: State, since: float, what: str, line: str) -> Decision:
    """What this node lost (its host, or its own run) is kept as its record, not published
    (the store may be gone), and ends the job here."""
    record = Record(
        kind=LOST, hostname=config.hostname, node_rank=config.node_rank, time=since, what=what
    )
    return _end_job(state, line, "stopping this node's workers", (Publish(record, local=True),))


def _end_job(state: State, line: str, action: str, records: Tuple[Action, ...] = ()) -> Decision:
    """The job ends (``line`` says why; ``records`` to publish first): stop this node's
    workers (torch's restarts cut off before anything else), or, when they had all finished,
    leave torch's exit barrier."""
    if state.succeeded:
        leave = Say(
            f"{line}; this node's workers had finished: ending now, not waiting in torch's"
            " exit barrier"
        )
        return state._replace(phase=Phase.LEAVING, failed=True), (*records, leave, Leave())
    new = state._replace(phase=Phase.STOPPING, failed=True, answer=Ask.STOP)
    return new, (ZeroRestarts(), *records, Say(f"{line}; {action}"), StopWorkers())


def _workers_ended(config: Config, state: State, event: WorkersEnded) -> Decision:
    stopping = state.phase == Phase.STOPPING
    if event.succeeded:
        if state.succeeded:
            return state, ()
        mark: Tuple[Action, ...] = (MarkDone(),) if config.watching_peers else ()
        if stopping:  # they had all ended well before the stop: this node succeeded
            return state._replace(succeeded=True), mark
        if state.phase == Phase.LEAVING:
            return state, ()
        return state._replace(phase=Phase.FINISHED, succeeded=True), mark
    if event.record is None or not (event.final or stopping):
        return state, ()  # torch restarts the workers
    tell = config.watching_peers and event.record.kind == FAILED
    phase = state.phase if stopping else Phase.FAILED
    return state._replace(phase=phase, failed=True), (PublishOwn(event.record, tell),)


def _exiting(config: Config, state: State) -> Decision:
    new = state._replace(exiting=True)
    learn = (
        state.succeeded and not state.failed and config.report and config.watching_peers
    )  # a node that passed torch's barrier before it heard of a failure elsewhere
    return new, (LookForStop(),) if learn else ()


def exit_code(state: State) -> int:
    """The code a process ended by the watch (not by torch) exits with."""
    return 0 if state.succeeded else 1
