"""What happens after the start: the agent-side mechanisms and their settings. Pure.

Each mechanism is a runtime patch (:mod:`torchrun_jsc.patches`), switchable by its own
``TORCHRUN_JSC_*`` variable, and each decision here carries its reason for explain:

| mechanism | patch | on for |
|---|---|---|
| workers die with the agent (a watcher); own session | ``worker_start`` | every launch (Linux) |
| SIGUSR1/SIGUSR2 reach each worker once | ``forward_signals`` | every launch (Linux) |
| grace between SIGTERM and SIGKILL | ``term_grace`` | when ``TORCHRUN_JSC_TERM_GRACE`` is set |
| lost nodes stop the job (the job watch) | ``job_watch`` | multi-node c10d launches it fixes |
| going on without a lost node; spares | ``recovery`` | those, with ``--max_restarts`` > 0 |
| the host's place kept in each round | ``host_in_round`` | those, when the host is known |
| the next node hosts when the host is lost | ``failover`` | those, unless ``is_host`` is given |
| requeue after the warning signal or a failure | ``requeue`` | ``TORCHRUN_JSC_REQUEUE=1`` |
| the job's first failure, last line (the job watch) | ``job_watch`` | every launch |
| a stop by a signal, one line | ``stop_signal`` | every launch (with the failure report) |
| wait for a late rendezvous host | ``wait_for_host`` | nodes that do not host the store |
| group ranks in node order | ``rank_order`` | multi-node c10d launches with a node rank |
| a lost write of the rendezvous state waits | ``backoff`` | multi-node c10d launches it fixes |
"""

from __future__ import annotations

from typing import Optional, Tuple

from .decisions import Collector
from .facts import NodeFacts
from .handover import Handover
from .patches import backoff, params
from .patches.params import AGENT_SIDE
from .release import __version__
from .request import Request, handled_signals
from .runtime.events.entry import LogTarget
from .runtime.requeue.decision import Budget
from .runtime.watch.vocabulary import Config
from .slurm import SlurmStep, expand_hostlist
from .torch_defaults import KEEP_ALIVE_INTERVAL
from .versions import OWN_SESSION_FROM, TorchVersion

#: The patches this module decides (all others fix the start).
PATCHES = AGENT_SIDE

#: A host that starts this much later than its Slurm step gets a shorter join_timeout.
LATE_HOST = 30.0
#: The shortest join_timeout a late host is given.
MIN_JOIN = 30


def plan_agent_side(
    side: Collector,
    request: Request,
    version: TorchVersion,
    facts: NodeFacts,
    is_host: Optional[bool],
    fixing: bool,
    address: Optional[str] = None,
) -> None:
    """Collect into ``side`` the mechanisms for a launch that goes ahead; ``fixing``:
    torchrun_jsc fixes this multi-node c10d rendezvous (its endpoint and this node's role are
    known); ``address``: the address this node advertises."""
    if request.options is None:
        return
    settings = request.settings
    linux = facts.platform.startswith("linux")
    forward = _signals(request, side) if linux else ()
    own_session = bool(forward) and version.key < OWN_SESSION_FROM
    orphans = settings.kill_orphans and linux
    if orphans or forward:
        side.patch(
            params.WorkerStart(kill_orphans=orphans, new_session=own_session),
            "each worker: "
            + ", ".join(
                what
                for what, on in (
                    ("handed to the orphan watcher, so it dies with the agent", orphans),
                    ("in its own session, as from torch 2.2", own_session),
                    ("registered so that signals can be passed on", bool(forward)),
                )
                if on
            ),
        )
    side.decide(
        "orphans",
        "killed with the agent" if orphans else "not handled",
        "a watcher process kills them when the agent ends"
        if orphans
        else _off("TORCHRUN_JSC_KILL_ORPHANS", linux),
    )
    if forward:
        side.patch(
            params.ForwardSignals(signals=forward),
            "passed on unless their sender reached the workers",
        )
    if settings.term_grace is not None:
        side.patch(params.TermGrace(seconds=settings.term_grace), "TORCHRUN_JSC_TERM_GRACE")
        side.decide("grace before SIGKILL", f"{settings.term_grace:g} s", "TORCHRUN_JSC_TERM_GRACE")
    watch_at = len(side.patches)
    config = _peer_watch(side, request, _this_node(request, facts, is_host, fixing), fixing)
    config = _recovery(side, request, config, fixing)
    if config.recovery:
        config = _failover(side, request, config, facts, address)
    scope = "the whole job" if fixing else "this node (no shared rendezvous store)"
    if settings.failure_report:
        config = config._replace(report=True)
        side.decide("failure report", "on", f"last line names the first failure of {scope}")
        side.patch(params.StopSignal(), "one line instead of torch's traceback")
        side.decide(
            "stop by a signal",
            "one line",
            "SIGTERM/SIGINT/SIGHUP/SIGQUIT: the signal, its cause when Slurm knows it, and how"
            " long the workers took to end; a second signal does not cut torch's shutdown short",
        )
    else:
        side.decide("failure report", "off", "TORCHRUN_JSC_FAILURE_REPORT=0")
    requeue = _requeue(side, request, forward)
    config = _events(side, request, version, facts, config, fixing)
    peer_timeout = config.peer_timeout
    parts = [
        what
        for what, on in (
            (f"heartbeats; a node quiet for {peer_timeout:g} s is lost", config.watching_peers),
            (f"the first failure of {scope}", config.report),
            ("the requeue's view of the job", requeue),
            ("the event log", config.events is not None),
        )
        if on
    ]
    if parts:
        side.patch(params.JobWatch(config=config), "; ".join(parts), at=watch_at)
    answer_at = len(side.patches)
    waits = fixing and _wait_for_host(side, request, facts, is_host)
    _store_answer(side, request, waits, answer_at)
    if fixing:
        _rank_order(side, request)
        _backoff(side, request)


def _store_answer(side: Collector, request: Request, waits: bool, at: int) -> None:
    """A rendezvous store that accepts and never answers is named and ends the agent (torch's
    c10d rendezvous; ``--standalone``'s own port is free by construction); ``waits``:
    ``wait_for_host`` is installed (after this one, which goes ``at`` its place) and bounds the
    calls told ``is_host=0`` itself."""
    options = request.options
    if options is None or options.rdzv_backend != "c10d" or options.standalone:
        return
    side.patch(
        params.StoreAnswer(clients=not waits),
        "a rendezvous store that never answers: said after read_timeout, one line and exit 1"
        " after join_timeout",
        at=at,
    )


def _off(variable: str, linux: bool) -> str:
    return f"{variable}=0" if linux else "not on Linux"


#: The rule that makes a forwarded signal reach each worker once (explain shows it).
_ONCE = (
    "TORCHRUN_JSC_FORWARD_SIGNALS; a signal that also reaches a probe process started like the"
    " workers (the agent's child, own session) came to them from its sender: not passed on"
)


def _signals(request: Request, side: Collector) -> Tuple[str, ...]:
    settings, options = request.settings, request.options
    assert options is not None
    torch_handles = set(handled_signals(options.signals_to_handle))  # compared as torch does
    forward = tuple(s for s in settings.forward_signals if s not in torch_handles)
    for name in settings.forward_signals:
        if name in torch_handles:
            side.decide(name, "torch's", "--signals-to-handle: torch stops the workers with it")
    if forward:
        side.decide(", ".join(forward), "passed on unless the workers got them", _ONCE)
    elif not settings.forward_signals:
        side.decide("SIGUSR1, SIGUSR2", "not handled", "TORCHRUN_JSC_FORWARD_SIGNALS=none")
    return forward


def _this_node(request: Request, facts: NodeFacts, is_host: Optional[bool], fixing: bool) -> Config:
    """The job watch's settings that say who this node is (nothing switched on yet)."""
    options, endpoint = request.options, request.endpoint
    assert options is not None
    config = Config(
        hostname=facts.hostname, node_rank=request.node_rank, grace=request.settings.term_grace
    )
    if fixing and endpoint is not None:
        config = config._replace(
            is_host=is_host,
            endpoint=endpoint.text,
            store_host=endpoint.host,
            store_port=endpoint.port_or_default,
            run_id=options.rdzv_id,
            elastic=options.min_nodes < options.max_nodes,
            max_nodes=options.max_nodes,
        )
    return config


def _peer_watch(side: Collector, request: Request, config: Config, fixing: bool) -> Config:
    """``config`` with heartbeats on, when there are peers to watch."""
    peer_timeout = request.settings.peer_timeout
    if peer_timeout <= 0:
        side.decide("lost nodes", "not watched", "TORCHRUN_JSC_PEER_TIMEOUT=0")
        return config
    if not fixing:
        side.decide("lost nodes", "not watched", "no multi-node c10d rendezvous to watch through")
        return config
    is_host = config.is_host
    role = (
        "watches every node"
        if is_host is True
        else "is watched by the rendezvous host"
        if is_host is False
        else "is watched by group rank 0"
    )
    side.decide(
        "lost nodes", f"after {peer_timeout:g} s", f"heartbeats through the store; this node {role}"
    )
    return config._replace(peer_timeout=peer_timeout)


def _recovery(side: Collector, request: Request, config: Config, fixing: bool) -> Config:
    """``config`` with recovery on, when a lost node restarts the job without it."""
    options = request.options
    assert options is not None
    restarts = options.max_restarts
    if not (fixing and config.watching_peers):
        return config  # no lost node is ever named: nothing to go on from
    if not request.settings.recovery:
        side.decide("after a lost node", "the job stops", "TORCHRUN_JSC_RECOVERY=0")
        return config
    if restarts == 0:
        side.decide("after a lost node", "the job stops", "--max_restarts=0")
        return config
    low, high = options.min_nodes, options.max_nodes
    side.patch(params.Recovery(), f"up to {restarts} restarts without a lost node")
    wait = config.peer_timeout
    if config.is_host is None:
        side.decide(
            "the rendezvous host's place",
            "not kept",
            "which node hosts the store is torch's own guess here: the host may wait as a spare",
        )
    else:
        side.patch(
            params.HostInRound(),
            f"the others keep the rendezvous host's place in every round (up to {wait:g} s)",
        )
    smaller = f", or on fewer nodes down to {low}" if low < high else ""
    side.decide(
        "after a lost node",
        f"restart without it (up to {restarts} times)",
        f"a spare takes its place{smaller}; the training script resumes from its checkpoint",
    )
    step = request.slurm
    extra = 0 if step is None else step.nodes_beyond(high)
    here = f" ({extra} in this {step.num_nodes}-node step)" if extra and step else ""
    side.decide(
        "spares",
        f"agents beyond {high} nodes{here}",
        "they wait in the rendezvous, take a lost node's place, and end with the job",
    )
    return config._replace(recovery=True, min_nodes=low, max_restarts=restarts)


def _failover(
    side: Collector, request: Request, config: Config, facts: NodeFacts, address: Optional[str]
) -> Config:
    """``config`` with failover on, when the next live node hosts after a lost host."""
    settings = request.settings
    if not settings.failover:
        side.decide("rendezvous host lost", "the job stops", "TORCHRUN_JSC_FAILOVER=0")
        return config
    if request.is_host is not None:
        side.decide(
            "rendezvous host lost",
            "the job stops",
            "is_host is given in --rdzv_conf: no other node could be made the host",
        )
        return config
    config = config._replace(
        failover=True,
        host_node_rank=settings.host_node_rank if request.node_rank is not None else None,
        host_addresses=tuple(facts.endpoint_addresses),
        address=address,
        previous=request.handover,
    )
    wait = config.failover_wait
    side.patch(params.Failover(), "the next live node in node-rank order hosts the next round")
    side.decide(
        "rendezvous host lost",
        "the next live node hosts",
        "every other node starts its agent again at the next live node of the last round in"
        " node-rank order (its own address, the same port), within the restarts; that node"
        f" has {wait:g} s to serve, else it is lost too and the job stops (in a process started"
        " by the torchrun_jsc command, which can start itself again)",
    )
    return config


def _requeue(side: Collector, request: Request, forward: Tuple[str, ...]) -> bool:
    """Whether the job is requeued after the warning signal and after a failure."""
    settings, step = request.settings, request.slurm
    if not settings.requeue:
        side.decide("requeue", "off", "TORCHRUN_JSC_REQUEUE=0")
        return False
    assert step is not None and step.job_id is not None  # Settings refuses it otherwise
    budget = Budget(
        job=step.job_id,
        done=step.restart_count or 0,
        most=settings.requeue_max,
        min_run=settings.requeue_min_run,
        grace=settings.requeue_grace,
        signal=settings.requeue_signal,
        stop_code=settings.requeue_stop_code,
        node_rank=request.node_rank,
        host=_host_name(step, settings.host_node_rank),
        lost_before=_lost_before(step, request),
    )
    side.patch(params.Requeue(budget=budget), f"job {budget.job} back into the queue")
    signal = budget.signal
    reach = (
        "passed on to the workers unless they got it"
        if signal in forward
        else "not passed on to the workers (TORCHRUN_JSC_FORWARD_SIGNALS)"
    )
    side.decide(
        f"requeue after {signal}",
        f"the workers have {budget.grace:g} s to save and end",
        f"{reach}; then one node requeues job {budget.job} (scontrol requeue)",
    )
    before = f" and {', '.join(budget.lost_before)}" if budget.lost_before else ""
    failure = (
        f"requeued, the lost nodes{before} excluded"
        if settings.failure_report
        else "not requeued (TORCHRUN_JSC_FAILURE_REPORT=0)"
    )
    side.decide(
        "requeue after a failure",
        failure,
        "one the job cannot recover from inside its allocation"
        + ("; the nodes lost before the handover: their store is gone" if before else ""),
    )
    left = max(budget.most - budget.done, 0)
    side.decide(
        "requeues left",
        f"{left} of {budget.most}",
        f"SLURM_RESTART_COUNT={budget.done}; by cause: a lost node or the warning whatever the"
        f" run's length, a failure of the script itself not after a run shorter than"
        f" {budget.min_run:g} s (TORCHRUN_JSC_REQUEUE_MIN_RUN)",
    )
    code = budget.stop_code
    side.decide(
        "no requeue after",
        "no exit code" if code is None else f"a worker's exit code {code}",
        "TORCHRUN_JSC_REQUEUE_STOP_CODE: the script ends the chain of requeues",
    )
    return True


def _events(
    side: Collector,
    request: Request,
    version: TorchVersion,
    facts: NodeFacts,
    config: Config,
    fixing: bool,
) -> Config:
    """``config`` with the event log, where there is one to write."""
    given, step = request.settings.events, request.slurm
    job = step.job_id if step is not None and step.job_id else ""
    if given == "":
        side.decide("event log", "off", "TORCHRUN_JSC_EVENTS=none")
        return config
    if given is None and not job:
        side.decide("event log", "off", "not a Slurm job; TORCHRUN_JSC_EVENTS=FILE writes one")
        return config
    if not fixing:
        side.decide("event log", "off", "no multi-node c10d rendezvous host to write it")
        return config
    name = f"torchrun_jsc-{job or config.run_id}.events.jsonl"
    if given is None:
        folder = step.submit_dir if step is not None and step.submit_dir else "."
        path, why = f"{folder.rstrip('/') or '/'}/{name}", "in the job's submit directory"
    elif facts.events_folder or given.endswith("/"):
        path, why = f"{given.rstrip('/') or '/'}/{name}", "TORCHRUN_JSC_EVENTS names a folder"
    else:
        path, why = given, "TORCHRUN_JSC_EVENTS"
    options = request.options
    assert options is not None
    launch = (
        ("torch", str(version)),
        ("torchrun_jsc", __version__),
        ("nnodes", options.nnodes),
        ("max_restarts", options.max_restarts),
        ("peer_timeout", config.peer_timeout),
        ("recovery", config.recovery),
        ("failover", config.failover),
        ("requeue", request.settings.requeue),
    )
    nodes = step.num_nodes if step is not None and step.num_nodes else options.max_nodes
    target = LogTarget(
        path=path,
        job=job,
        run=step.restart_count or 0 if step is not None else 0,
        nodes=nodes,
        launch=(*launch, ("nodes", nodes)),
    )
    side.decide("event log", path, f"{why}; the rendezvous host appends to it")
    return config._replace(events=target)


def _lost_before(step: SlurmStep, request: Request) -> Tuple[str, ...]:
    """The Slurm names of the nodes lost before this process (the hosts of the handovers and
    the nodes that left earlier rounds)."""
    ranks = request.handover.lost_nodes if request.handover else ()
    return tuple(name for name in (_host_name(step, rank) for rank in ranks) if name)


def _host_name(step: SlurmStep, host_node_rank: int) -> str:
    """The Slurm name of the rendezvous host's node (node ranks follow the step's node list),
    or "" when the step does not say."""
    try:
        names = expand_hostlist(step.nodelist or "")
    except ValueError:
        return ""
    return names[host_node_rank] if 0 <= host_node_rank < len(names) else ""


def _wait_for_host(
    side: Collector, request: Request, facts: NodeFacts, is_host: Optional[bool]
) -> bool:
    """Whether this node waits for its host (the ``wait_for_host`` patch is installed); a host
    that started late gets a shorter join_timeout here."""
    settings, endpoint = request.settings, request.endpoint
    assert endpoint is not None
    join = request.conf_seconds("join_timeout")
    read = request.conf_seconds("read_timeout")
    age = facts.step_age or 0.0
    handed = request.handover
    if handed is not None:
        return _wait_after_handover(side, endpoint.text, handed, is_host)
    if not settings.wait_for_host:
        side.decide(
            "waiting for the host", f"read_timeout ({read} s)", "TORCHRUN_JSC_WAIT_FOR_HOST=0"
        )
        return False
    if is_host is False:
        wait = max(join - age, float(read))
        side.patch(
            params.WaitForHost(endpoint=endpoint.text, wait=wait), f"until join_timeout ({join} s)"
        )
        since = f", {age:.0f} s of it gone since the Slurm step started" if age >= 1 else ""
        side.decide("waiting for the host", f"{wait:.0f} s", f"join_timeout {join} s{since}")
        return True
    if is_host and facts.step_age is not None and facts.step_age >= LATE_HOST:
        left = int(join - facts.step_age)
        side.conf["join_timeout"] = str(max(left, MIN_JOIN))
        why = (
            f"this node started {facts.step_age:.0f} s after its Slurm step; the other nodes wait"
            f" {join} s from the step's start"
        )
        side.decide("join_timeout", side.conf["join_timeout"], why)
        if left < MIN_JOIN:
            side.warnings.append(
                f"this node, the rendezvous host, started {facts.step_age:.0f} s after its Slurm"
                f" step, later than the other nodes wait for it (join_timeout {join} s): they"
                " have probably given up"
            )
    return False


def _wait_after_handover(
    side: Collector, endpoint: str, handed: Handover, is_host: Optional[bool]
) -> bool:
    """After a handover the next host has ``handed.wait`` seconds: the others wait that long
    for it (whether this node does), and it waits that long for them (a bound each can
    name)."""
    wait = handed.wait
    if is_host is False:
        side.patch(
            params.WaitForHost(endpoint=endpoint, wait=wait, handed_over=True),
            "the next host after a handover",
        )
        side.decide("waiting for the host", f"{wait:g} s", "the next host after a handover")
        return True
    if is_host:
        side.conf["join_timeout"] = str(max(int(wait), MIN_JOIN))
        side.decide("join_timeout", side.conf["join_timeout"], "after a handover: the others' wait")
    return False


def _rank_order(side: Collector, request: Request) -> None:
    options, settings = request.options, request.settings
    assert options is not None
    mode = settings.rank_order or ("node" if request.node_rank is not None else "torch")
    if mode == "torch" or request.node_rank is None:
        why = (
            "TORCHRUN_JSC_RANK_ORDER=torch"
            if settings.rank_order == "torch"
            else "no node rank on this node"
        )
        side.decide("rank order", "torch's (address as a string)", why)
        return
    elastic = " (of the nodes present)" if options.min_nodes < options.max_nodes else ""
    side.patch(params.RankOrder(node_rank=request.node_rank), "group ranks follow node ranks")
    side.decide(
        "rank order",
        f"node rank{elastic}",
        f"node rank {request.node_rank} from {request.node_rank_source}",
    )


def _backoff(side: Collector, request: Request) -> None:
    """A node whose write of torch's rendezvous state lost waits before it tries again."""
    if not request.settings.backoff:
        side.decide("lost state writes", "tried again at once", "TORCHRUN_JSC_BACKOFF=0")
        return
    given = request.conf.get("keep_alive_interval", "")
    interval = KEEP_ALIVE_INTERVAL
    source = f"torch's keep-alive interval, {KEEP_ALIVE_INTERVAL} s"
    if given.isdigit() and 0 < int(given) < KEEP_ALIVE_INTERVAL:
        interval, source = int(given), f"keep_alive_interval={given} in --rdzv_conf"
    cap = backoff.cap_for(interval)
    side.patch(
        params.Backoff(first=backoff.FIRST, cap=cap),
        "fewer tries when many nodes write torch's rendezvous state at once",
    )
    side.decide(
        "lost state writes",
        f"a random wait up to {backoff.FIRST:g} s, doubling per loss in a row, at most {cap:g} s",
        f"at most half of {source}",
    )
