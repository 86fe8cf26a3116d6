"""The job watch's decision, by tables: (config, state, event) -> next state and actions."""

from __future__ import annotations

from typing import List, Tuple

import pytest

from torchrun_jsc.runtime.records import report
from torchrun_jsc.runtime.records.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.watch import machine as watch
from torchrun_jsc.runtime.watch.machine import decide
from torchrun_jsc.runtime.watch.vocabulary import (
    Action,
    Answer,
    Ask,
    Config,
    Event,
    Exiting,
    Joined,
    Log,
    MembersLost,
    MonitorLooks,
    Phase,
    Publish,
    PublishOwn,
    Requeuing,
    Rewatch,
    Say,
    State,
    StopSeen,
    StoreQuiet,
    ToldToStop,
    WorkersEnded,
)

WATCHED = Config(
    hostname="node1", node_rank=1, endpoint="node0i:29500", peer_timeout=60.0, report=True
)
ELASTIC = WATCHED._replace(elastic=True)
UNWATCHED = WATCHED._replace(peer_timeout=0.0)

TRAINING = State(phase=Phase.TRAINING)
FINISHED = State(phase=Phase.FINISHED, succeeded=True)
STOPPING = State(phase=Phase.STOPPING, failed=True)
LEAVING = State(phase=Phase.LEAVING, failed=True, succeeded=True)
FAILED_HERE = State(phase=Phase.FAILED, failed=True)
RESTARTING = State(phase=Phase.RESTARTING)

OWN_FAILURE = Record(kind=FAILED, hostname="node1", node_rank=1, rank=1, exitcode=3, ranks_ended=1)
OWN_STOP = Record(kind=STOPPED, hostname="node1", node_rank=1, ranks_ended=2)
CAUSE = Record(kind=FAILED, hostname="node2", node_rank=2, rank=2, local_rank=0, exitcode=3)


def lost(restarts_left: bool = False) -> MembersLost:
    return MembersLost(("k3",), "node3", 3, 61.0, 1000.0, restarts_left)


def quiet(stuck: float, silent: float) -> StoreQuiet:
    return StoreQuiet(stuck=stuck, silent=silent, now=2000.0)


def kinds(actions: Tuple[Action, ...]) -> List[str]:
    """The actions' kinds but the event log's (``test_machine_events.py`` has those)."""
    return [type(a).__name__ for a in actions if not isinstance(a, Log)]


TABLE = [
    # name, config, state, event, next state, action kinds
    ("first round starts the watch", WATCHED, State(), Joined(), TRAINING, ["StartWatch"]),
    ("first round, peers unwatched", UNWATCHED, State(), Joined(), TRAINING, []),
    ("a later round", WATCHED, TRAINING, Joined(), TRAINING, []),
    ("the round after a restart", WATCHED, RESTARTING, Joined(), TRAINING, []),
    (
        "lost member stops the job",
        WATCHED,
        TRAINING,
        lost(),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
    ),
    (
        "lost member, elastic with restarts: restart without it",
        ELASTIC,
        TRAINING,
        lost(restarts_left=True),
        State(Phase.RESTARTING, Ask.RESTART),
        ["Say", "Rewatch"],
    ),
    (
        "lost member, elastic without restarts",
        ELASTIC,
        TRAINING,
        lost(restarts_left=False),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
    ),
    (
        "lost member after this node finished: leave",
        ELASTIC,
        FINISHED,
        lost(restarts_left=True),
        LEAVING,
        ["Publish", "TellStop", "Say", "Leave"],
    ),
    ("lost member while stopping", WATCHED, STOPPING, lost(), STOPPING, []),
    (
        # before torch 2.1 a failed agent waits in torch's exit barrier: a lost node must end it
        "lost member after its own failure",
        WATCHED,
        FAILED_HERE,
        lost(),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
    ),
    (
        "told to stop after its own failure",
        WATCHED,
        FAILED_HERE,
        ToldToStop(CAUSE),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Say", "StopWorkers"],
    ),
    (
        "host hangs after its own failure",
        WATCHED,
        FAILED_HERE,
        quiet(60.0, 60.0),
        State(Phase.STOPPING, Ask.STOP, failed=True, out=True),
        ["ZeroRestarts", "Publish", "Say", "StopWorkers"],
    ),
    (
        "lost member while restarting",
        ELASTIC,
        RESTARTING,
        lost(restarts_left=False),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
    ),
    (
        "told to stop while restarting",
        ELASTIC,
        RESTARTING,
        ToldToStop(CAUSE),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Say", "StopWorkers"],
    ),
    ("told to stop while leaving", WATCHED, LEAVING, ToldToStop(CAUSE), LEAVING, []),
    ("host hangs while leaving", WATCHED, LEAVING, quiet(60.0, 60.0), LEAVING, []),
    (
        "told to stop while exiting",
        WATCHED,
        TRAINING._replace(exiting=True),
        ToldToStop(CAUSE),
        TRAINING._replace(exiting=True),
        [],
    ),
    (
        "host hangs while exiting",
        WATCHED,
        FAILED_HERE._replace(exiting=True),
        quiet(60.0, 60.0),
        FAILED_HERE._replace(exiting=True),
        [],
    ),
    ("joined after finishing", WATCHED, FINISHED, Joined(), FINISHED, []),
    ("joined while stopping", WATCHED, STOPPING, Joined(), STOPPING, []),
    (
        "lost member while exiting",
        WATCHED,
        TRAINING._replace(exiting=True),
        lost(),
        TRAINING._replace(exiting=True),
        [],
    ),
    (
        "told to stop",
        WATCHED,
        TRAINING,
        ToldToStop(CAUSE),
        State(Phase.STOPPING, Ask.STOP, failed=True),
        ["ZeroRestarts", "Say", "StopWorkers"],
    ),
    (
        "told to stop after finishing",
        WATCHED,
        FINISHED,
        ToldToStop(CAUSE),
        LEAVING,
        ["Say", "Leave"],
    ),
    ("told to stop twice", WATCHED, STOPPING, ToldToStop(CAUSE), STOPPING, []),
    ("store answering", WATCHED, TRAINING, quiet(0.0, 1.0), TRAINING, []),
    (
        "store hangs for the timeout",
        WATCHED,
        TRAINING,
        quiet(60.0, 60.0),
        State(Phase.STOPPING, Ask.STOP, failed=True, out=True),
        ["ZeroRestarts", "Publish", "Say", "StopWorkers"],
    ),
    ("store refuses after a good end", WATCHED, FINISHED, quiet(0.0, 300.0), FINISHED, []),
    (
        "store hangs after a good end",
        WATCHED,
        FINISHED,
        quiet(60.0, 60.0),
        LEAVING._replace(out=True),
        ["Publish", "Say", "Leave"],
    ),
    ("monitor, nothing asked", WATCHED, TRAINING, MonitorLooks(), TRAINING, ["Answer"]),
    (
        "workers finished",
        WATCHED,
        TRAINING,
        WorkersEnded(succeeded=True, final=True),
        FINISHED,
        ["MarkDone"],
    ),
    (
        "workers finished, peers unwatched",
        UNWATCHED,
        TRAINING,
        WorkersEnded(succeeded=True, final=True),
        FINISHED,
        [],
    ),
    (
        "workers had finished when the stop came",
        WATCHED,
        STOPPING,
        WorkersEnded(succeeded=True, final=True),
        STOPPING._replace(succeeded=True),
        ["MarkDone"],
    ),
    (
        "workers finished while leaving",
        WATCHED,
        LEAVING,
        WorkersEnded(succeeded=True, final=True),
        LEAVING,
        [],
    ),
    (
        "a stop found by the stop: nobody told",
        WATCHED,
        STOPPING,
        WorkersEnded(succeeded=False, final=True, record=OWN_STOP),
        STOPPING,
        ["PublishOwn"],
    ),
    (
        "own failure, restarts left: torch restarts",
        WATCHED,
        TRAINING,
        WorkersEnded(succeeded=False, final=False),
        TRAINING,
        [],
    ),
    (
        "own final failure",
        WATCHED,
        TRAINING,
        WorkersEnded(succeeded=False, final=True, record=OWN_FAILURE),
        FAILED_HERE,
        ["PublishOwn"],
    ),
    (
        "own failure found by the stop",
        WATCHED,
        STOPPING,
        WorkersEnded(succeeded=False, final=True, record=OWN_FAILURE),
        STOPPING,
        ["PublishOwn"],
    ),
    (
        "finished, exiting: look for a stop",
        WATCHED,
        FINISHED,
        Exiting(),
        FINISHED._replace(exiting=True),
        ["LookForStop"],
    ),
    (
        "finished, exiting, report off",
        WATCHED._replace(report=False),
        FINISHED,
        Exiting(),
        FINISHED._replace(exiting=True),
        [],
    ),
    ("stopping, exiting", WATCHED, STOPPING, Exiting(), STOPPING._replace(exiting=True), []),
    (
        "finished, exiting, peers unwatched",
        UNWATCHED,
        FINISHED,
        Exiting(),
        FINISHED._replace(exiting=True),
        [],
    ),
    (
        "finished, exiting, the job failed already",
        WATCHED,
        LEAVING,
        Exiting(),
        LEAVING._replace(exiting=True),
        [],
    ),
    ("a stop seen at the end", WATCHED, FINISHED, StopSeen(), FINISHED._replace(failed=True), []),
    ("requeuing: deaf", WATCHED, TRAINING, Requeuing(), TRAINING._replace(exiting=True), []),
]


@pytest.mark.parametrize(
    "config, state, event, after, actions", [row[1:] for row in TABLE], ids=[r[0] for r in TABLE]
)
def test_decide(
    config: Config, state: State, event: Event, after: State, actions: List[str]
) -> None:
    new, done = decide(config, state, event)
    assert new == after
    assert kinds(done) == actions


def test_the_monitor_is_told_once() -> None:
    state = State(Phase.STOPPING, Ask.STOP, failed=True)
    state, (answer,) = decide(WATCHED, state, MonitorLooks())
    assert answer == Answer(Ask.STOP) and state.answer is None
    _, (again,) = decide(WATCHED, state, MonitorLooks())
    assert again == Answer(None)


def test_the_lines_say_who_and_why() -> None:
    _, actions = decide(WATCHED, TRAINING, lost())
    say = next(a for a in actions if isinstance(a, Say))
    assert say.line == (
        "torchrun_jsc: node3 (node rank 3) has not been heard from for 61 s"
        " (TORCHRUN_JSC_PEER_TIMEOUT=60); stopping the job"
    )
    publish = next(a for a in actions if isinstance(a, Publish))
    assert publish.record == Record(kind=LOST, hostname="node3", node_rank=3, time=1000.0)
    assert publish.unread == ("k3",) and not publish.local
    _, actions = decide(ELASTIC, TRAINING, lost(restarts_left=True))
    assert actions[0] == Say(
        "torchrun_jsc: node3 (node rank 3) has not been heard from for 61 s"
        " (TORCHRUN_JSC_PEER_TIMEOUT=60); restarting the workers without it"
    )
    assert actions[-1] == Rewatch(("k3",))
    _, actions = decide(WATCHED, TRAINING, ToldToStop(None))
    assert Say("torchrun_jsc: another node stopped the job; stopping this node's workers") in (
        actions
    )
    _, actions = decide(WATCHED, FINISHED, ToldToStop(CAUSE))
    assert actions[0] == Say(
        "torchrun_jsc: node2 (node rank 2): rank 2 (local rank 0) exited with code 3 at"
        " 00:00:00.000 UTC; this node's workers had finished: ending now, not waiting in"
        " torch's exit barrier"
    )


def test_several_lost_and_a_member_without_a_node_rank() -> None:
    event = MembersLost(("k3", "k4"), "node3", None, 61.0, 1000.0, False)
    _, actions = decide(WATCHED, TRAINING, event)
    say = next(a for a in actions if isinstance(a, Say))
    assert say.line.startswith("torchrun_jsc: node3 has not been heard from for 61 s")
    assert "(TORCHRUN_JSC_PEER_TIMEOUT=60) (and 1 more); stopping the job" in say.line


def test_a_lost_host_is_kept_here_and_named_with_the_endpoint() -> None:
    _, actions = decide(WATCHED, TRAINING, quiet(61.0, 62.0))
    publish = next(a for a in actions if isinstance(a, Publish))
    assert publish.local and publish.record.what == "the rendezvous host node0i:29500"
    assert publish.record.time == 2000.0 - 62.0
    say = next(a for a in actions if isinstance(a, Say))
    assert say.line.startswith("torchrun_jsc: the rendezvous host node0i:29500 has not answered")


@pytest.mark.parametrize(
    "config, record, tell",
    [(WATCHED, OWN_FAILURE, True), (UNWATCHED, OWN_FAILURE, False), (WATCHED, OWN_STOP, False)],
    ids=["failure-tells", "unwatched-keeps-quiet", "a-stop-tells-nobody"],
)
def test_own_failure_tells_the_others_only_when_it_is_a_failure(
    config: Config, record: Record, tell: bool
) -> None:
    _, actions = decide(config, TRAINING, WorkersEnded(False, True, record))
    assert actions == (PublishOwn(record, tell),)


@pytest.mark.parametrize(
    "state, code", [(STOPPING, 1), (STOPPING._replace(succeeded=True), 0), (LEAVING, 0)]
)
def test_exit_code(state: State, code: int) -> None:
    assert watch.exit_code(state) == code


@pytest.mark.parametrize("phase_state", [TRAINING, FAILED_HERE], ids=["training", "failed"])
def test_a_node_that_did_not_run_for_the_peer_timeout_stops_and_says_why(
    phase_state: State,
) -> None:
    """Thawed after the others stopped or went on without it: its own line, not torch's
    traceback alone, and not a 'rendezvous host has not answered' it would otherwise print."""
    event = StoreQuiet(stuck=0.0, silent=95.0, now=2000.0, paused=94.0)
    state, actions = decide(WATCHED, phase_state, event)
    assert state == State(Phase.STOPPING, Ask.STOP, failed=True, out=True)
    assert kinds(actions) == ["ZeroRestarts", "Publish", "Say", "StopWorkers"]
    publish = next(a for a in actions if isinstance(a, Publish))
    assert publish.local and publish.record.time == 2000.0 - 94.0
    assert report.describe(publish.record).startswith(
        "this node, node1 (node rank 1), stopped responding"
    )
    say = next(a for a in actions if isinstance(a, Say))
    assert say.line == (
        "torchrun_jsc: this node did not run for 94 s (frozen or suspended;"
        " TORCHRUN_JSC_PEER_TIMEOUT=60): the other nodes have stopped the job or gone on without"
        " it; stopping this node's workers"
    )


@pytest.mark.parametrize("paused", [0.0, 30.0, 59.9])
def test_a_short_pause_is_no_alarm(paused: float) -> None:
    event = StoreQuiet(stuck=0.0, silent=paused + 1.0, now=2000.0, paused=paused)
    assert decide(WATCHED, TRAINING, event) == (TRAINING, ())
