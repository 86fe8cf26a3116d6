"""The job watch's decisions for recovery, by tables: who is lost and whether the job goes on
(a spare, a smaller job, or why not), spares, and the restart said once on every node."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from torchrun_jsc.runtime.watch.machine import decide
from torchrun_jsc.runtime.watch.vocabulary import (
    Action,
    Ask,
    Config,
    Event,
    Exiting,
    Joined,
    Log,
    Member,
    MembersLost,
    Phase,
    Say,
    SetRestarts,
    SpareFound,
    SpareReleased,
    State,
    StoreQuiet,
)

#: --nnodes=4 --max_restarts=3, lost nodes watched, recovery on.
RECOVER = Config(
    hostname="node0",
    node_rank=0,
    endpoint="node0i:29500",
    peer_timeout=60.0,
    report=True,
    recovery=True,
    min_nodes=4,
    max_restarts=3,
    run_id="job7",
)
#: --nnodes=3:4.
SMALLER = RECOVER._replace(min_nodes=3, elastic=True)
#: --nnodes=1:4 and 2:4.
ANY_SIZE = RECOVER._replace(min_nodes=1, elastic=True)
HALF = RECOVER._replace(min_nodes=2, elastic=True)

WAITING = State()
SPARE = State(phase=Phase.SPARE)
TRAINING = State(phase=Phase.TRAINING)
RESTARTING = State(phase=Phase.RESTARTING, answer=Ask.RESTART)
FINISHED = State(phase=Phase.FINISHED, succeeded=True)


def lost(
    spares: int,
    members: int = 4,
    left: bool = True,
    keys: int = 1,
    known: Optional[int] = None,
    known_live: Optional[int] = None,
    gone: int = 0,
) -> MembersLost:
    """``keys`` of ``members`` lost, ``spares`` waiting; the job had ``known`` spares when the
    round formed (default: the waiting ones), ``known_live`` of them still beat (default: all
    the waiting ones)."""
    names = tuple(f"k{3 - n}" for n in range(keys))
    known = spares if known is None else known
    return MembersLost(
        names,
        "node3",
        3,
        61.0,
        1000.0,
        left,
        members=members,
        gone=gone,
        spares=spares,
        known=known,
        known_live=min(spares, known) if known_live is None else known_live,
    )


def kinds(actions: Tuple[Action, ...]) -> List[str]:
    """The actions' kinds but the event log's (``test_machine_events.py`` has those)."""
    return [type(a).__name__ for a in actions if not isinstance(a, Log)]


def line(actions: Tuple[Action, ...]) -> Optional[str]:
    return next((a.line for a in actions if isinstance(a, Say)), None)


STOPPED = State(Phase.STOPPING, Ask.STOP, failed=True)
MINORITY = STOPPED._replace(minority=True)
#: name, config, state, event, next state, actions, a piece of the line (or None: no line).
TABLE = [
    (
        "lost, a spare waits",
        RECOVER,
        TRAINING,
        lost(spares=1),
        RESTARTING,
        ["Say", "Rewatch"],
        "has not been heard from for 61 s (TORCHRUN_JSC_PEER_TIMEOUT=60); restarting the"
        " workers without it",
    ),
    (
        "lost, no spare, at the minimum",
        RECOVER,
        TRAINING,
        lost(spares=0),
        STOPPED,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "; cannot go on: 3 nodes left, --nnodes needs at least 4, and no spare waits;"
        " stopping the job",
    ),
    (
        "lost, no spare, above the minimum",
        SMALLER,
        TRAINING,
        lost(spares=0),
        RESTARTING,
        ["Say", "Rewatch"],
        "restarting the workers without it",
    ),
    (
        "two lost, one spare, --nnodes=3:4",
        SMALLER,
        TRAINING,
        lost(spares=1, keys=2),
        RESTARTING,
        ["Say", "Rewatch"],
        "(and 1 more); restarting",
    ),
    (
        "two lost, no spare, --nnodes=3:4: a group big enough to go on, but too small a job",
        SMALLER,
        TRAINING,
        lost(spares=0, keys=2),
        STOPPED,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: 2 nodes left, --nnodes needs at least 3, and no spare waits",
    ),
    (
        "three of four lost with the host's group too small (a majority lost, or a partition)",
        ANY_SIZE,
        TRAINING,
        lost(spares=0, keys=3),
        MINORITY,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: 1 of the job's 4 nodes is left here, and going on needs 3 (a majority;"
        " 2 with the rendezvous host): the others may be training on without this node;"
        " stopping the job",
    ),
    (
        "the third of four lost one scan after the other two: 1 of 4 is left, not 3 of 4",
        ANY_SIZE,
        RESTARTING,
        lost(spares=0, keys=1, gone=2),
        MINORITY._replace(answer=Ask.STOP),
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: 1 of the job's 4 nodes is left here, and going on needs 3",
    ),
    (
        "the second of four lost one scan after the first, --nnodes=3:4: 2 left, too few",
        SMALLER,
        RESTARTING,
        lost(spares=0, keys=1, gone=1),
        STOPPED,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: 2 nodes left, --nnodes needs at least 3, and no spare waits",
    ),
    (
        "two of four lost: half of the job's nodes, the host among them, go on",
        HALF,
        TRAINING,
        lost(spares=0, keys=2),
        RESTARTING,
        ["Say", "Rewatch"],
        "restarting the workers without them",
    ),
    (
        "three of four lost, one spare known: two of five may not go on",
        SMALLER,
        TRAINING,
        lost(spares=1, keys=3),
        MINORITY,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "2 of the job's 5 nodes are left here, and going on needs 3 (a majority; 3 with",
    ),
    (
        "two of four lost, two spares known: four of six go on",
        HALF,
        TRAINING,
        lost(spares=2, keys=2),
        RESTARTING,
        ["Say", "Rewatch"],
        "restarting the workers without them",
    ),
    (
        "two of four lost, two spares known but one of them lost too: three of six go on",
        HALF,
        TRAINING,
        lost(spares=1, keys=2, known=2),
        RESTARTING,
        ["Say", "Rewatch"],
        "restarting the workers without them",
    ),
    (
        "two of four lost, both spares known lost too, a new one waits: two of six stop",
        HALF,
        TRAINING,
        lost(spares=1, keys=2, known=2, known_live=0),
        MINORITY,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "2 of the job's 6 nodes are left here, and going on needs 4",
    ),
    (
        "the majority rule holds only where the job could go on: no restarts left",
        ANY_SIZE,
        TRAINING,
        lost(spares=0, keys=3, left=False),
        STOPPED,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: no restarts left (--max_restarts=3)",
    ),
    (
        "lost, no restarts left",
        RECOVER,
        TRAINING,
        lost(spares=1, left=False),
        STOPPED,
        ["ZeroRestarts", "Publish", "TellStop", "Say", "StopWorkers"],
        "cannot go on: no restarts left (--max_restarts=3)",
    ),
    (
        "lost after this node's workers finished",
        RECOVER,
        FINISHED,
        lost(spares=1),
        State(Phase.LEAVING, failed=True, succeeded=True),
        ["Publish", "TellStop", "Say", "Leave"],
        "not waiting in torch's exit barrier",
    ),
    (
        "first round",
        RECOVER,
        WAITING,
        Joined(size=4),
        TRAINING,
        ["StartWatch", "SetRestarts"],
        None,
    ),
    (
        "re-formed with a spare",
        RECOVER,
        RESTARTING,
        Joined(restart=1, size=4, left=(Member("node3", 3),), came=(Member("node4", 4),)),
        TRAINING._replace(restarts=1, departed=(Member("node3", 3),)),
        ["Say", "SetRestarts"],
        "torchrun_jsc: restart 1 of 3: node3 (node rank 3) lost; going on with node4 (node rank"
        " 4) in its place",
    ),
    (
        "re-formed smaller, by torch before this node's watch asked",
        SMALLER,
        TRAINING,
        Joined(restart=1, size=3, left=(Member("node3", 3),)),
        TRAINING._replace(restarts=1, departed=(Member("node3", 3),)),
        ["Say", "SetRestarts"],
        "torchrun_jsc: restart 1 of 3: node3 (node rank 3) lost; going on with 3 nodes",
    ),
    (
        "a restart said already is not said again; a departed node is kept once",
        RECOVER,
        TRAINING._replace(restarts=1, departed=(Member("node3", 3),)),
        Joined(restart=1, size=4, left=(Member("node3", 3),)),
        TRAINING._replace(restarts=1, departed=(Member("node3", 3),)),
        ["SetRestarts"],
        None,
    ),
    (
        "the nodes that left accumulate over the rounds",
        RECOVER,
        TRAINING._replace(restarts=1, departed=(Member("node3", 3),)),
        Joined(restart=2, size=3, left=(Member("node2", 2),)),
        TRAINING._replace(restarts=2, departed=(Member("node3", 3), Member("node2", 2))),
        ["Say", "SetRestarts"],
        "restart 2 of 3: node2 (node rank 2) lost; going on with 3 nodes",
    ),
    (
        "a node that comes back to a round is no departed node",
        SMALLER,
        TRAINING._replace(restarts=1, departed=(Member("node3", 3), Member("node2", 2))),
        Joined(restart=2, size=4, came=(Member("node2", 2),)),
        TRAINING._replace(restarts=2, departed=(Member("node3", 3),)),
        ["Say", "SetRestarts"],
        "restart 2 of 3: node2 (node rank 2) joined; going on with 4 nodes",
    ),
    (
        "a round torch re-formed clears a restart not yet answered",
        RECOVER,
        TRAINING._replace(answer=Ask.RESTART),
        Joined(restart=2, size=4),
        TRAINING._replace(restarts=2),
        ["Say", "SetRestarts"],
        "restart 2 of 3: the workers restarted; going on with 4 nodes",
    ),
    (
        "a spare before its first round",
        RECOVER,
        WAITING,
        SpareFound(size=4),
        SPARE,
        ["Say", "StartWatch", "RegisterSpare"],
        "torchrun_jsc: spare: the job's 4 nodes are training (rendezvous id job7); this node"
        " waits to take a lost node's place",
    ),
    (
        "no spare without recovery",
        RECOVER._replace(recovery=False),
        WAITING,
        SpareFound(4),
        WAITING,
        [],
        None,
    ),
    ("a member is no spare", RECOVER, TRAINING, SpareFound(size=4), TRAINING, [], None),
    (
        "the spare joins",
        RECOVER,
        SPARE,
        Joined(restart=1, size=4),
        TRAINING._replace(restarts=1),
        ["Say", "SetRestarts"],
        "torchrun_jsc: spare: this node takes a lost node's place (restart 1 of 3; 4 nodes)",
    ),
    (
        "the job completed without the spare",
        RECOVER,
        SPARE,
        SpareReleased(completed=True),
        FINISHED,
        ["Say", "EndSpare"],
        "torchrun_jsc: spare: the job completed without needing this node",
    ),
    (
        "the job stopped before the spare was needed",
        RECOVER,
        SPARE,
        SpareReleased(completed=False),
        State(Phase.LEAVING, failed=True),
        ["Say", "EndSpare"],
        "the job stopped before this node was needed",
    ),
    (
        "torch ended a spare that had not said so yet: the job completed",
        RECOVER,
        WAITING,
        SpareReleased(completed=True),
        FINISHED,
        ["Say", "EndSpare"],
        "torchrun_jsc: spare: the job completed without needing this node",
    ),
    ("a joined spare is not released", RECOVER, TRAINING, SpareReleased(True), TRAINING, [], None),
    (
        "the end of a completed job is noted for the spares, which end first",
        RECOVER,
        FINISHED,
        Exiting(),
        FINISHED._replace(exiting=True),
        ["LookForStop", "MarkCompleted", "AwaitSpares"],
        None,
    ),
    (
        "a failed job is not noted as completed",
        RECOVER,
        State(Phase.STOPPING, failed=True),
        Exiting(),
        State(Phase.STOPPING, failed=True, exiting=True),
        [],
        None,
    ),
]


@pytest.mark.parametrize(
    "config, state, event, after, actions, said",
    [row[1:] for row in TABLE],
    ids=[r[0] for r in TABLE],
)
def test_decide(
    config: Config,
    state: State,
    event: Event,
    after: State,
    actions: List[str],
    said: Optional[str],
) -> None:
    new, done = decide(config, state, event)
    assert new == after
    assert kinds(done) == actions
    text = line(done)
    if said is None:
        assert text is None
    else:
        assert text is not None and said in text, text


@pytest.mark.parametrize(("restart", "left"), [(0, 3), (1, 2), (3, 0), (5, 0)])
def test_the_job_wide_restart_count_caps_torchs_budget(restart: int, left: int) -> None:
    state = RESTARTING if restart else WAITING
    _, actions = decide(RECOVER, state, Joined(restart=restart, size=4))
    assert SetRestarts(left) in actions


def test_a_frozen_node_that_thaws_is_out_and_may_not_close_the_rendezvous() -> None:
    event = StoreQuiet(stuck=0.0, silent=95.0, now=2000.0, paused=94.0)
    state, _ = decide(RECOVER, TRAINING, event)
    assert state.out and state.answer == Ask.STOP
    lost_host = StoreQuiet(stuck=61.0, silent=61.0, now=2000.0)
    assert decide(RECOVER, TRAINING, lost_host)[0].out
    assert not decide(RECOVER, TRAINING, lost(spares=0))[0].out  # it stops the job: closing is fine
