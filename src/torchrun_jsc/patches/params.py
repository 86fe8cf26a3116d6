"""Every runtime patch's name and the typed parameters it is installed with: the one registry
the plan, the version table, explain and :func:`torchrun_jsc.patches.install` share. Light on
purpose (no torch, no patch module imported): the plan builds these on every launch."""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple, Type, Union

from ..handover import Handover
from ..runtime.requeue.decision import Budget
from ..runtime.watch.vocabulary import Config


class FqHostname(NamedTuple):
    """``fq_hostname``: ``_get_fq_hostname()`` returns ``address`` (torch < 2.4)."""

    address: str


class StoreInfoBuild(NamedTuple):
    """``store_info_build``: group rank 0 publishes ``address`` as MASTER_ADDR (torch 2.4)."""

    address: str


class NodeDesc(NamedTuple):
    """``node_desc``: this node's descriptor defaults ``local_addr`` to ``address``."""

    address: str


class HostMatcher(NamedTuple):
    """``host_matcher``: torch's host recognition answers ``is_local`` for ``host``."""

    host: str
    is_local: bool


class StdFromStr(NamedTuple):
    """``std_from_str``: torch < 2.0 reads ``--redirects``/``--tee`` on Python >= 3.11."""


class KeepRendezvous(NamedTuple):
    """``keep_rendezvous``: torch 2.3 keeps the rendezvous open when it restarts workers."""


class WorkerStart(NamedTuple):
    """``worker_start``: workers registered, handed to the orphan watcher, own session."""

    kill_orphans: bool
    new_session: bool


class ForwardSignals(NamedTuple):
    """``forward_signals``: ``signals`` (names) passed on to the workers."""

    signals: Tuple[str, ...]


class TermGrace(NamedTuple):
    """``term_grace``: ``seconds`` between SIGTERM and SIGKILL."""

    seconds: float


class JobWatch(NamedTuple):
    """``job_watch``: this agent's job watch with its settings, built once by the plan
    (heartbeats, the first failure, the other patches' part of the watch)."""

    config: Config


class StopSignal(NamedTuple):
    """``stop_signal``: a stop by a signal is one line, and a second signal does not interrupt
    torch's shutdown of the workers."""


class StoreAnswer(NamedTuple):
    """``store_answer``: a rendezvous store that never answers is named after ``read_timeout``
    and ends the agent after ``join_timeout``; ``clients=False``: not for calls told
    ``is_host=0`` (``wait_for_host`` bounds those)."""

    clients: bool = True


class Recovery(NamedTuple):
    """``recovery``: a lost node restarts the job without it (spares, a smaller job) while
    the job watch's restarts last and its minimum of nodes remains."""


class HostInRound(NamedTuple):
    """``host_in_round``: the others keep a place for the rendezvous host in every round, up
    to the job watch's peer timeout."""


class Failover(NamedTuple):
    """``failover``: a lost rendezvous host hands the rendezvous over to the next live node
    (the job watch's settings say who hosts now, how long the next host has and how this node
    is reached)."""


class Requeue(NamedTuple):
    """``requeue``: the job is requeued after Slurm's warning signal and after a failure it
    cannot recover from, within ``budget``."""

    budget: Budget


class SpareWait(NamedTuple):
    """``spare_wait``: a spare's join does not time out while it waits (torch < 2.3)."""


class WaitForHost(NamedTuple):
    """``wait_for_host``: wait up to ``wait`` seconds for the host at ``endpoint``."""

    endpoint: str
    wait: float
    #: The host is the next one after a handover: one that never comes ends the agent.
    handed_over: bool = False


class Backoff(NamedTuple):
    """``backoff``: after a lost write of the rendezvous state, a random wait up to ``first``
    seconds, doubling with each loss in a row up to ``cap``."""

    first: float
    cap: float


class RankOrder(NamedTuple):
    """``rank_order``: group ranks follow ``node_rank``."""

    node_rank: int


Params = Union[
    FqHostname,
    StoreInfoBuild,
    NodeDesc,
    HostMatcher,
    StdFromStr,
    KeepRendezvous,
    WorkerStart,
    ForwardSignals,
    TermGrace,
    JobWatch,
    StopSignal,
    StoreAnswer,
    Recovery,
    HostInRound,
    Failover,
    Requeue,
    SpareWait,
    WaitForHost,
    RankOrder,
    Backoff,
]

#: Patch name (its module in :mod:`torchrun_jsc.patches`) -> its parameters.
REGISTRY: Dict[str, Type[Params]] = {
    "fq_hostname": FqHostname,
    "store_info_build": StoreInfoBuild,
    "node_desc": NodeDesc,
    "host_matcher": HostMatcher,
    "std_from_str": StdFromStr,
    "keep_rendezvous": KeepRendezvous,
    "worker_start": WorkerStart,
    "forward_signals": ForwardSignals,
    "term_grace": TermGrace,
    "job_watch": JobWatch,
    "stop_signal": StopSignal,
    "store_answer": StoreAnswer,
    "recovery": Recovery,
    "host_in_round": HostInRound,
    "failover": Failover,
    "requeue": Requeue,
    "spare_wait": SpareWait,
    "wait_for_host": WaitForHost,
    "rank_order": RankOrder,
    "backoff": Backoff,
}
_NAMES = {kind: name for name, kind in REGISTRY.items()}

#: The patches that act after the start (decided in :mod:`torchrun_jsc.lifecycle`).
AGENT_SIDE = (
    "worker_start",
    "forward_signals",
    "term_grace",
    "job_watch",
    "stop_signal",
    "store_answer",
    "recovery",
    "host_in_round",
    "failover",
    "requeue",
    "wait_for_host",
    "rank_order",
    "backoff",
)


def name_of(params: Params) -> str:
    """The patch ``params`` are for."""
    return _NAMES[type(params)]


def name_of_type(kind: Type[Params]) -> str:
    """The patch whose parameters are ``kind``."""
    return _NAMES[kind]


class PatchSpec(NamedTuple):
    """A runtime patch to install: its typed parameters, and why."""

    params: Params
    reason: str = ""

    @property
    def name(self) -> str:
        """The patch's module name in :mod:`torchrun_jsc.patches`."""
        return name_of(self.params)

    @property
    def data(self) -> Dict[str, object]:
        """The parameters as plain data (explain)."""
        return as_data(self.params)


def as_data(params: Params) -> Dict[str, object]:
    """``params`` as plain data (the node as a dict, sequences as lists), for explain."""
    data: Dict[str, object] = {}
    for key, value in params._asdict().items():
        if isinstance(value, Config):
            value = _config_data(value)
        elif isinstance(value, (Budget, Handover)):
            value = value._asdict()
        elif isinstance(value, tuple):
            value = list(value)
        data[key] = value
    return data


def _config_data(config: Config) -> Dict[str, object]:
    """The job watch's settings as plain data (the handover as a dict, addresses as a list)."""
    data: Dict[str, object] = {}
    for key, value in config._asdict().items():
        if isinstance(value, Handover):
            value = value._asdict()
        elif isinstance(value, tuple):
            value = list(value)
        data[key] = value
    return data
