"""The job watch of one agent as a state machine: its states, the events that move it (the
values are in :mod:`.vocabulary`), and :func:`decide`, which is pure (state
and event in; the next state and the actions to carry out out).
:mod:`torchrun_jsc.runtime.session.adapter` feeds it events from torch's hooks and the
watch's threads and hands the actions to their owners.

The phases of a node::

    WAITING ──joined──▶ TRAINING ──workers finished──▶ FINISHED
                          │  ▲                           │
           member lost,   │  └──joined── RESTARTING      │ job failed elsewhere
           elastic with   └──────────────▶ (answer)      ▼ (or the host hangs)
           restarts left                              LEAVING  (end now, exit 0)
    TRAINING ──its own workers failed, no restarts left──▶ FAILED
    TRAINING, RESTARTING, FAILED ──member lost / told to stop / host silent──▶ STOPPING
                                        (stop the workers; end the process, exit 1)
    WAITING ──a round formed without it (recovery)──▶ SPARE ──joined──▶ TRAINING
    SPARE ──the job completed / stopped──▶ (end: exit 0 / 1)
    TRAINING, RESTARTING, SPARE ──host silent (failover)──▶ HANDING_OVER
                                        (stop the workers; start the agent again)
    any phase ──requeuing (after Slurm's warning)──▶ (the requeue ends the process)

Recovery (``--max_restarts`` > 0): a lost member restarts the job without it while restarts
are left and the live members and waiting spares make up ``--nnodes``' minimum; every node
says each restart once, when the new round forms (the restart count is torch's round number
minus the job's first, the same on every node, and caps torch's own per-agent budget).

Failover (recovery, ``TORCHRUN_JSC_FAILOVER``): a rendezvous host silent for the peer timeout
is lost like any node while restarts are left: every other node (a spare too) hands over to the
first of the last round's members in node-rank order (:mod:`torchrun_jsc.handover`); its next
process says the restart once the new round forms.

FAILED still listens: torch 2.1+ ends such an agent itself, but before 2.1 it waits in torch's
exit barrier for every node, and a lost node or host would keep it there for 300 s.

``failed`` (the job failed: the last line names its first failure), ``succeeded`` (this node's
workers all ended well, which decides its exit code) and ``exiting`` (the process's end has
begun) hold across phases; ``answer`` is what torch's monitor is to be told at its next look.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from ... import handover
from ..events import entry as events
from ..records.report import FAILED, ITSELF, LOST, Record, describe, node_name
from . import heartbeats, quorum
from .vocabulary import (
    Action,
    Answer,
    Ask,
    AwaitSpares,
    Config,
    Decision,
    EndSpare,
    Event,
    Exiting,
    HandOver,
    Joined,
    Leave,
    Log,
    LookForStop,
    LookUpNextHost,
    MarkCompleted,
    MarkDone,
    Member,
    MembersLost,
    MonitorLooks,
    NextHosts,
    Phase,
    Publish,
    PublishOwn,
    RegisterSpare,
    Requeuing,
    Rewatch,
    Say,
    SetRestarts,
    SpareFound,
    SpareReleased,
    StartWatch,
    State,
    StopSeen,
    StopWorkers,
    StoreQuiet,
    TellStop,
    ToldToStop,
    WorkersEnded,
    ZeroRestarts,
)

#: Phases in which this node is ending the job already: news of a lost member, a stop or a
#: silent host changes nothing more.
_ENDED = (Phase.STOPPING, Phase.LEAVING, Phase.HANDING_OVER)


def listening(state: State) -> bool:
    """Whether news that ends the job (a lost member, a stop, a silent host) still matters."""
    return state.phase not in _ENDED and not state.exiting


# ---------------------------------------------------------------------------- decide


def decide(config: Config, state: State, event: Event) -> Decision:
    """The next state and the actions for ``event``."""
    if isinstance(event, Joined):
        return _joined(config, state, event)
    if isinstance(event, SpareFound):
        return _spare_found(config, state, event)
    if isinstance(event, SpareReleased):
        return _spare_released(state, event)
    if isinstance(event, MonitorLooks):
        return state._replace(answer=None), (Answer(state.answer),)
    if isinstance(event, WorkersEnded):
        if state.phase == Phase.HANDING_OVER:
            return state, ()  # stopped for the handover: the next process starts them again
        return _workers_ended(config, state, event)
    if isinstance(event, Exiting):
        return _exiting(config, state)
    if isinstance(event, Requeuing):
        return state._replace(exiting=True), ()
    if isinstance(event, StopSeen):
        return state._replace(failed=True), ()
    if isinstance(event, NextHosts):
        if state.next_hosts != event.before:
            return state, ()  # a newer round's candidates
        return state._replace(next_hosts=event.found), ()
    if not listening(state):
        return state, ()
    if isinstance(event, MembersLost):
        return _members_lost(config, state, event)
    if isinstance(event, ToldToStop):
        why = "another node stopped the job" if event.cause is None else describe(event.cause)
        return _end_job(state, f"torchrun_jsc: {why}", "stopping this node's workers")
    return _store_quiet(config, state, event)


def _joined(config: Config, state: State, event: Joined) -> Decision:
    budget: Tuple[Action, ...] = ()
    if config.recovery:
        budget = (SetRestarts(max(config.max_restarts - event.restart, 0)),)
    going = (Phase.WAITING, Phase.SPARE, Phase.RESTARTING, Phase.TRAINING)
    if config.failover and state.phase in going:
        state = state._replace(
            next_hosts=event.next_hosts, round_size=event.size, round_spares=event.spares
        )
        budget = (*budget, *_look_up(event.next_hosts))
    if state.phase == Phase.WAITING:
        start: Tuple[Action, ...] = (StartWatch(),) if config.watching_peers else ()
        new = state._replace(phase=Phase.TRAINING, restarts=event.restart)
        return new, (*start, *_handed_over(config, event), _round_log(event), *budget)
    if state.phase == Phase.SPARE:
        new = state._replace(phase=Phase.TRAINING, restarts=event.restart)
        return new, (Say(_spare_line(config, event)), *budget)
    if state.phase not in (Phase.RESTARTING, Phase.TRAINING):
        return state, ()
    # a restart asked for but not yet answered is done: torch re-formed the round already
    answer = None if state.answer == Ask.RESTART else state.answer
    # a node that left a round and came back (it missed one round) is no departed node
    departed = tuple(
        m for m in dict.fromkeys((*state.departed, *event.left)) if m not in event.came
    )
    new = state._replace(
        phase=Phase.TRAINING,
        answer=answer,
        restarts=max(state.restarts, event.restart),
        departed=departed,
    )
    if not config.recovery or event.restart <= state.restarts:
        return new, (_round_log(event), *budget)
    restart = Log(
        events.RESTART,
        (
            ("restart", event.restart),
            ("left", [_node(m) for m in event.left]),
            ("came", [_node(m) for m in event.came]),
            ("size", event.size),
        ),
    )
    joins = tuple(
        Log(events.JOIN, (("spare", _node(m)), ("restart", event.restart))) for m in event.came
    )
    return new, (Say(_restart_line(config, event)), _round_log(event), restart, *joins, *budget)


def _round_log(event: Joined) -> Log:
    """The round's event (the adapter adds its members, by name, and the host)."""
    return Log(
        events.ROUND, (("restart", event.restart), ("size", event.size), ("spares", event.spares))
    )


def _node(member: Member) -> Dict[str, Any]:
    return events.node(member.hostname, member.node_rank)


def _look_up(candidates: Tuple[handover.Candidate, ...]) -> Tuple[Action, ...]:
    """Look up the first candidate's own address (its key may hold another name for it)."""
    return (LookUpNextHost(candidates),) if candidates else ()


def _spare_line(config: Config, event: Joined) -> str:
    """A spare's line when it joins."""
    return (
        f"torchrun_jsc: spare: this node takes a lost node's place (restart"
        f" {event.restart} of {config.max_restarts}; {event.size} nodes)"
    )


def _handed_over(config: Config, event: Joined) -> Tuple[Action, ...]:
    """The first round of a process started again after a lost host: the restart, said."""
    previous = config.previous
    if previous is None or event.restart != previous.restart:
        return ()
    line = Say(handover.restart_line(previous, config.max_restarts, event.size))
    log = Log(
        events.HANDOVER,
        (
            ("lost", previous.lost),
            ("restart", previous.restart),
            ("lost_nodes", list(previous.lost_nodes)),
        ),
    )
    return (line, Say(_spare_line(config, event)), log) if previous.spare else (line, log)


def _restart_line(config: Config, event: Joined) -> str:
    """``restart 1 of 3: node3 (node rank 3) lost; going on with node4 in its place``."""
    left = ", ".join(m.name for m in event.left)
    came = ", ".join(m.name for m in event.came)
    what = f"{left} lost" if left else f"{came} joined" if came else "the workers restarted"
    if left and came:
        going = f"going on with {came} in {'its' if len(event.left) == 1 else 'their'} place"
    else:
        going = f"going on with {handover.nodes(event.size)}"
    return f"torchrun_jsc: restart {event.restart} of {config.max_restarts}: {what}; {going}"


def _spare_found(config: Config, state: State, event: SpareFound) -> Decision:
    if not config.recovery or state.phase not in (Phase.WAITING, Phase.SPARE):
        return state, ()
    known = state._replace(restarts=event.restart)
    if config.failover:
        known = known._replace(
            next_hosts=event.next_hosts, round_size=event.size, round_spares=event.spares
        )
    if state.phase == Phase.SPARE:  # the round changed while this node waits
        return known, _look_up(event.next_hosts)
    line = (
        f"torchrun_jsc: spare: the job's {event.size} nodes are training (rendezvous id"
        f" {config.run_id}); this node waits to take a lost node's place"
    )
    start: Tuple[Action, ...] = (StartWatch(),) if config.watching_peers else ()
    new = known._replace(phase=Phase.SPARE)
    return new, (Say(line), *start, RegisterSpare(), *_look_up(event.next_hosts))


def _spare_released(state: State, event: SpareReleased) -> Decision:
    if state.phase not in (Phase.SPARE, Phase.WAITING) or state.exiting:
        return state, ()
    if event.completed:
        line = "torchrun_jsc: spare: the job completed without needing this node"
        return state._replace(phase=Phase.FINISHED, succeeded=True), (Say(line), EndSpare(0))
    line = "torchrun_jsc: spare: the job stopped before this node was needed"
    return state._replace(phase=Phase.LEAVING, failed=True), (Say(line), EndSpare(1))


def _members_lost(config: Config, state: State, event: MembersLost) -> Decision:
    hostname, node_rank = event.hostname, event.node_rank
    others = "" if len(event.keys) == 1 else f" (and {len(event.keys) - 1} more)"
    what = hostname if node_rank is None else node_name(hostname, node_rank)
    lost = (
        f"{what} has not been heard from for {event.quiet:.0f} s"
        f" (TORCHRUN_JSC_PEER_TIMEOUT={config.peer_timeout:g}){others}"
    )
    outvoted = _outvoted(config, event)
    reason = outvoted or _cannot_go_on(config, event)
    going_on = (config.recovery or config.elastic) and reason is None and not state.succeeded
    log = Log(
        events.LOST,
        (
            ("lost", events.node(hostname, node_rank)),
            ("more", len(event.keys) - 1),
            ("detection", "heartbeat"),
            ("quiet", round(event.quiet, 1)),
            ("last_seen", events.iso(event.last_seen)),
            ("next", events.RESTART if going_on else events.STOP),
        ),
    )
    if going_on:
        them = "it" if len(event.keys) == 1 else "them"
        restart = Say(f"torchrun_jsc: {lost}; restarting the workers without {them}")
        hosts = tuple(c for c in state.next_hosts if c.key not in event.keys)
        new = state._replace(phase=Phase.RESTARTING, answer=Ask.RESTART, next_hosts=hosts)
        return new, (restart, log, Rewatch(event.keys))
    if config.recovery and reason is not None and not state.succeeded:
        lost = f"{lost}; cannot go on: {reason}"
    record = Record(kind=LOST, hostname=hostname, node_rank=node_rank, time=event.last_seen)
    if outvoted is not None and not state.succeeded:
        state = state._replace(minority=True)
    return _end_job(
        state,
        f"torchrun_jsc: {lost}",
        "stopping the job",
        (log, Publish(record, unread=event.keys), TellStop(record)),
    )


def _outvoted(config: Config, event: MembersLost) -> Optional[str]:
    """Why the rendezvous host's group may not go on without the lost members (None: it may,
    or the job does not go on anyway): too few of the last round's nodes are left with it
    (:mod:`.quorum`)."""
    if not (config.recovery and event.restarts_left):
        return None
    left = event.members - event.gone - len(event.keys) + event.known_live
    return quorum.refusal(left, event.members + event.known, with_host=True)


def _cannot_go_on(config: Config, event: MembersLost) -> Optional[str]:
    """Why the job cannot go on without the lost members (None: it can)."""
    if not event.restarts_left:
        return f"no restarts left (--max_restarts={config.max_restarts})"
    if not config.recovery:
        return None
    live = event.members - event.gone - len(event.keys)
    if live + event.spares >= config.min_nodes:
        return None
    waiting = "no spare waits" if not event.spares else f"only {event.spares} spare(s) wait"
    return f"{live} nodes left, --nnodes needs at least {config.min_nodes}, and {waiting}"


def _store_quiet(config: Config, state: State, event: StoreQuiet) -> Decision:
    peer_timeout = config.peer_timeout
    if event.paused >= peer_timeout:
        return _resumed(config, state, event)
    if config.failover and event.paused >= config.beat_interval:
        state = state._replace(paused_until=event.now, paused_for=event.paused)
    if not heartbeats.host_lost(event.stuck, event.silent, peer_timeout, state.succeeded):
        return state, ()
    line = (
        f"torchrun_jsc: the rendezvous host {config.endpoint} has not answered for"
        f" {event.silent:.0f} s (TORCHRUN_JSC_PEER_TIMEOUT={peer_timeout:g})"
    )
    what = f"the rendezvous host {config.endpoint}"
    if config.failover:
        refused = _no_handover(config, state, event.now - event.silent)
        if refused is None:
            return _hand_over(config, state, line, what)
        line = f"{line}; cannot go on: {refused}"
    return _lost_here(config, state, event.now - event.silent, what, line)


def _no_handover(config: Config, state: State, silent_since: float) -> Optional[str]:
    """Why the rendezvous cannot be handed over (None: it can)."""
    if state.succeeded or state.phase not in (Phase.TRAINING, Phase.RESTARTING, Phase.SPARE):
        return "this node's part of the job is over"
    if state.paused_until > silent_since:  # torch's keep-alives may have dropped it meanwhile
        return (
            f"this node itself did not run for {state.paused_for:.0f} s meanwhile (frozen or"
            " suspended): the others may have gone on without it"
        )
    if state.restarts >= config.max_restarts:
        return f"no restarts left (--max_restarts={config.max_restarts})"
    if not state.next_hosts:
        return "no other node of the last round is left to host the rendezvous"
    total = state.round_size + state.round_spares
    least = quorum.needed(total, with_host=False)
    if config.max_nodes and least > config.max_nodes:
        return (
            f"going on without the rendezvous host needs {least} of the job's {total} nodes"
            f" (a majority), more than a round may have (--nnodes' maximum,"
            f" {config.max_nodes})"
        )
    return None


def _hand_over(config: Config, state: State, line: str, what: str) -> Decision:
    """Every node that lost its host starts again at the first of ``next_hosts``."""
    nxt = state.next_hosts[0]
    before = config.previous.lost_nodes if config.previous else ()
    host = () if config.host_node_rank is None else (config.host_node_rank,)
    left = tuple(m.node_rank for m in state.departed if m.node_rank is not None)
    lost = tuple(r for r in dict.fromkeys((*left, *host)) if r not in before)
    handed = handover.Handover(
        endpoint=handover.endpoint(nxt.address, config.store_port),
        host_node_rank=nxt.node_rank,
        restart=state.restarts + 1,
        lost=what,
        wait=config.failover_wait,
        spare=state.phase == Phase.SPARE,
        quorum=quorum.needed(state.round_size + state.round_spares, with_host=False),
        lost_nodes=before + lost,
    )
    said = (
        f"{line}; handing over: {handed.host_name} hosts the next round (restart"
        f" {handed.restart} of {config.max_restarts}); this node stops its workers and starts"
        " its agent again"
    )
    new = state._replace(phase=Phase.HANDING_OVER, out=True)
    return new, (Say(said), HandOver(handed))


def _resumed(config: Config, state: State, event: StoreQuiet) -> Decision:
    """This node did not run for the peer timeout (frozen, suspended): the others have stopped
    the job or gone on without it; whatever its store connection says now, that is why."""
    line = (
        f"torchrun_jsc: this node did not run for {event.paused:.0f} s (frozen or suspended;"
        f" TORCHRUN_JSC_PEER_TIMEOUT={config.peer_timeout:g}): the other nodes have stopped the"
        " job or gone on without it"
    )
    what = f"{ITSELF}{node_name(config.hostname, config.node_rank)},"
    return _lost_here(config, state, event.now - event.paused, what, line)


def _lost_here(config: Config, state: State, since: float, what: str, line: str) -> Decision:
    """What this node lost (its host, or its own run) is kept as its record, not published
    (the store may be gone), and ends the job here."""
    record = Record(
        kind=LOST, hostname=config.hostname, node_rank=config.node_rank, time=since, what=what
    )
    new, actions = _end_job(
        state, line, "stopping this node's workers", (Publish(record, local=True),)
    )
    return new._replace(out=True), actions


def _end_job(state: State, line: str, action: str, records: Tuple[Action, ...] = ()) -> Decision:
    """The job ends (``line`` says why; ``records`` to publish first): stop this node's
    workers (torch's restarts cut off before anything else), or, when they had all finished,
    leave torch's exit barrier."""
    stop = Log(events.STOP, (("cause", line.removeprefix("torchrun_jsc: ")),))
    if state.succeeded:
        leave = Say(
            f"{line}; this node's workers had finished: ending now, not waiting in torch's"
            " exit barrier"
        )
        return state._replace(phase=Phase.LEAVING, failed=True), (*records, leave, stop, Leave())
    new = state._replace(phase=Phase.STOPPING, failed=True, answer=Ask.STOP)
    return new, (ZeroRestarts(), *records, Say(f"{line}; {action}"), stop, StopWorkers())


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
    good = state.succeeded and not state.failed
    # a node that passed torch's barrier before it heard of a failure elsewhere
    learn: Tuple[Action, ...] = (
        (LookForStop(),) if good and config.report and config.watching_peers else ()
    )
    done: Tuple[Action, ...] = (
        (MarkCompleted(), AwaitSpares())
        if good and config.recovery and state.phase != Phase.SPARE
        else ()
    )
    return new, (*learn, *done)


def exit_code(state: State) -> int:
    """The code a process ended by the watch (not by torch) exits with."""
    return 0 if state.succeeded else 1
