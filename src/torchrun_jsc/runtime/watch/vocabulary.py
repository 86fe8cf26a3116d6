"""The job watch's vocabulary: the phases of a node, its state and configuration, the events
that move it and the actions :func:`torchrun_jsc.runtime.watch.machine.decide` returns (all
immutable values; the decisions are in :mod:`torchrun_jsc.runtime.watch.machine`)."""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple, Optional, Tuple, Union

from ...handover import Candidate, Handover
from ...torch_defaults import TERM_GRACE
from .. import timing
from ..events.entry import LogTarget
from ..records.report import Record, node_name
from . import heartbeats


class Phase(Enum):
    """Where this node's part of the job stands."""

    WAITING = "waiting for the first rendezvous round"
    SPARE = "a spare: waiting to take a lost node's place"
    TRAINING = "workers running"
    RESTARTING = "restarting the workers without a lost node"
    FINISHED = "workers finished; in torch's exit barrier"
    FAILED = "workers failed, no restarts left"
    HANDING_OVER = "the rendezvous host is lost: starting again at the next host"
    STOPPING = "the job failed: stopping this node's workers"
    LEAVING = "the job failed after this node's workers finished: ending"


class Ask(Enum):
    """What torch's monitor is told at its next look."""

    STOP = "stop the workers, no restarts"
    RESTART = "restart the workers (torch re-forms the round)"


class Member(NamedTuple):
    """A node of a round, as it introduced itself (``hostname`` its member key when it did
    not)."""

    hostname: str
    node_rank: Optional[int] = None

    @property
    def name(self) -> str:
        """``node2 (node rank 2)``."""
        return node_name(self.hostname, self.node_rank)


class Config(NamedTuple):
    """The job watch's settings for this node, built once by the plan
    (:mod:`torchrun_jsc.lifecycle`) and installed by the ``job_watch`` patch: who this node is,
    what the plan switched on, and the bounds derived from them."""

    hostname: str = ""
    node_rank: Optional[int] = None
    #: Whether this node hosts the rendezvous store (None: torch decides; group rank 0 then).
    is_host: Optional[bool] = None
    endpoint: str = ""
    #: The rendezvous store's host (None: no store to use, e.g. ``--standalone``: the failure
    #: report then covers this node only) and port (the next host serves on the same one).
    store_host: Optional[str] = None
    store_port: int = 0
    run_id: str = ""
    #: ``--nnodes=MIN:MAX``: torch can go on without a lost node.
    elastic: bool = False
    #: ``--nnodes``' maximum (0: not known).
    max_nodes: int = 0
    #: The workers' seconds between SIGTERM and SIGKILL (None: torch's).
    grace: Optional[float] = None
    #: Seconds a member may be quiet before it is lost; 0: peers are not watched.
    peer_timeout: float = 0.0
    #: Whether the first-failure report is on (records in the store, the last line).
    report: bool = False
    #: Recovery: a lost node restarts the job without it (spares, a smaller job).
    recovery: bool = False
    #: ``--nnodes``' minimum and ``--max_restarts`` (recovery).
    min_nodes: int = 1
    max_restarts: int = 0
    #: Failover: a lost rendezvous host hands over to the next live node (recovery).
    failover: bool = False
    #: The current rendezvous host's node rank (None: not known) and addresses (neither is
    #: a candidate to host next).
    host_node_rank: Optional[int] = None
    host_addresses: Tuple[str, ...] = ()
    #: The address this node advertises (it tells the others, should it host next).
    address: Optional[str] = None
    #: The handover this process continues (None: the job's first process).
    previous: Optional[Handover] = None
    #: The job's event log (None: off); the rendezvous host writes it.
    events: Optional[LogTarget] = None

    @property
    def watching_peers(self) -> bool:
        """Whether heartbeats are on."""
        return self.peer_timeout > 0

    @property
    def beat_interval(self) -> float:
        """Seconds between two heartbeats (0 with heartbeats off)."""
        return heartbeats.interval_for(self.peer_timeout)

    @property
    def term_grace(self) -> float:
        """The workers' seconds between SIGTERM and SIGKILL (``grace``, else torch's)."""
        return float(TERM_GRACE if self.grace is None else self.grace)

    @property
    def failover_wait(self) -> float:
        """How long the nodes wait for the next host after a handover: its own detection of
        the loss (the peer timeout), its workers' end (the grace) and its agent's new start."""
        return self.peer_timeout + self.term_grace + timing.HANDOVER_START


class State(NamedTuple):
    """The watch's state (immutable; :func:`decide` returns the next one)."""

    phase: Phase = Phase.WAITING
    answer: Optional[Ask] = None
    failed: bool = False
    succeeded: bool = False
    exiting: bool = False
    #: The restarts said so far (recovery).
    restarts: int = 0
    #: This node is out of the job (frozen, cut off): the others may go on without it.
    out: bool = False
    #: Who would host the next round if the rendezvous host were lost, in order (failover).
    next_hosts: Tuple[Candidate, ...] = ()
    #: How many nodes the latest round has, and how many spares the job had then
    #: (:mod:`.quorum`).
    round_size: int = 0
    round_spares: int = 0
    #: This node's latest pause of a heartbeat interval or more, shorter than the peer
    #: timeout: when it ended (wall clock) and how long it was (failover).
    paused_until: float = 0.0
    paused_for: float = 0.0
    #: The nodes that left this node's rounds (lost, and gone on without): a requeue leaves
    #: them out, and a handover carries their node ranks on.
    departed: Tuple[Member, ...] = ()
    #: This node stopped because its group held too few of the job's nodes to go on: the
    #: others may be training on (no requeue on a guess).
    minority: bool = False


# ---------------------------------------------------------------------------- events


class Joined(NamedTuple):
    """A rendezvous round formed with this node in it: its ``size``, the job's restart count
    (``restart``; 0 for the first round), and the nodes that ``left`` and ``came`` since this
    node's previous round."""

    restart: int = 0
    size: int = 0
    left: Tuple[Member, ...] = ()
    came: Tuple[Member, ...] = ()
    #: Who would host the next round if the host were lost (failover), in order.
    next_hosts: Tuple[Candidate, ...] = ()
    #: The spares the job had when the round formed (recovery; :mod:`.quorum`).
    spares: int = 0


class SpareFound(NamedTuple):
    """Before joining, this node found a round of ``size`` nodes formed without it (posted
    again while it waits, when the round changes)."""

    size: int
    #: Who would host the next round if the host were lost (failover), in order.
    next_hosts: Tuple[Candidate, ...] = ()
    #: The job's restart count of that round.
    restart: int = 0
    #: The spares the job had when that round formed (:mod:`.quorum`).
    spares: int = 0


class SpareReleased(NamedTuple):
    """The job this spare waited for ended: ``completed``, or it stopped."""

    completed: bool


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
    #: The round's size and the live spares waiting (recovery); the spares the job had when
    #: the round formed (``known``) and how many of those still beat (:mod:`.quorum`).
    members: int = 0
    #: Members of this round declared lost by earlier events (not among ``keys``).
    gone: int = 0
    spares: int = 0
    known: int = 0
    known_live: int = 0


class NextHosts(NamedTuple):
    """The first of the candidates to host next (``before``) published its address:
    ``found`` replaces them (unless a newer round changed them meanwhile)."""

    before: Tuple[Candidate, ...]
    found: Tuple[Candidate, ...]


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


class Requeuing(NamedTuple):
    """The job is being requeued (its workers have ended after Slurm's warning signal): news
    of a lost member, a stop or a silent host changes nothing any more."""


Event = Union[
    Joined,
    SpareFound,
    SpareReleased,
    MembersLost,
    NextHosts,
    ToldToStop,
    StoreQuiet,
    MonitorLooks,
    WorkersEnded,
    StopSeen,
    Exiting,
    Requeuing,
]


# ---------------------------------------------------------------------------- actions


class Say(NamedTuple):
    """Print ``line`` on this node's stderr."""

    line: str


class Log(NamedTuple):
    """Write ``event`` (a name of :data:`~..events.entry.EVENTS`) with its ``fields`` to the
    job's event log, where this node writes it (the rendezvous host)."""

    event: str
    fields: Tuple[Tuple[str, Any], ...] = ()


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


class RegisterSpare(NamedTuple):
    """Tell the watcher that this node waits as a spare."""


class SetRestarts(NamedTuple):
    """torch's agent has at most ``left`` restarts (the job's count, not the agent's own)."""

    left: int


class EndSpare(NamedTuple):
    """End this spare's process with ``code`` (the last line first, if the job failed)."""

    code: int


class LookUpNextHost(NamedTuple):
    """Look up the address the first of ``candidates`` published (posts :class:`NextHosts`)."""

    candidates: Tuple[Candidate, ...]


class HandOver(NamedTuple):
    """Stop this node's workers and start its agent again with ``handover`` (the next host)."""

    handover: Handover


class MarkCompleted(NamedTuple):
    """Note in the store that the whole job completed (the spares end then)."""


class AwaitSpares(NamedTuple):
    """The job completed: where this node serves the store, wait for the waiting spares to
    end first (a spare that loses the store before it saw the end takes the host for lost)."""


Action = Union[
    Say,
    Log,
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
    RegisterSpare,
    SetRestarts,
    EndSpare,
    LookUpNextHost,
    HandOver,
    MarkCompleted,
    AwaitSpares,
]
Decision = Tuple[State, Tuple[Action, ...]]
