"""The job watch's events for the event log, by table: which ``Log`` actions :func:`decide`
returns for each case, and with which fields (the other actions are in test_machine*.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

from torchrun_jsc.handover import Handover
from torchrun_jsc.runtime.watch.machine import decide
from torchrun_jsc.runtime.watch.vocabulary import (
    Action,
    Config,
    Event,
    Joined,
    Log,
    Member,
    MembersLost,
    MonitorLooks,
    Phase,
    State,
    StoreQuiet,
    ToldToStop,
)

from .test_machine_recovery import SMALLER

#: --nnodes=3:4 --max_restarts=3, recovery on (test_machine_recovery's).
RECOVER = SMALLER
PLAIN = RECOVER._replace(recovery=False, elastic=False, max_restarts=0, min_nodes=4)
TRAINING = State(phase=Phase.TRAINING)
N3, N4 = Member("node3", 3), Member("node4", 4)


def logs(actions: Tuple[Action, ...]) -> List[Tuple[str, Dict[str, Any]]]:
    return [(a.event, dict(a.fields)) for a in actions if isinstance(a, Log)]


def lost(left: bool) -> MembersLost:
    return MembersLost(("k3",), "node3", 3, 61.04, 1000.5, left, members=4, spares=1)


def lost_fields(next_step: str) -> Dict[str, Any]:
    """The ``lost`` event of :func:`lost`'s node3, going on with ``next_step``."""
    return {
        "lost": {"name": "node3", "node_rank": 3},
        "more": 0,
        "detection": "heartbeat",
        "quiet": 61.0,
        "last_seen": "1970-01-01T00:16:40.500Z",
        "next": next_step,
    }


TABLE: List[Tuple[str, Config, State, Event, List[Tuple[str, Dict[str, Any]]]]] = [
    (
        "the first round",
        RECOVER,
        State(),
        Joined(size=4, spares=1),
        [("round", {"restart": 0, "size": 4, "spares": 1})],
    ),
    (
        "a restart with a spare in the lost node's place: the round, the restart, the join",
        RECOVER,
        TRAINING,
        Joined(restart=1, size=4, left=(N3,), came=(N4,)),
        [
            ("round", {"restart": 1, "size": 4, "spares": 0}),
            (
                "restart",
                {
                    "restart": 1,
                    "left": [{"name": "node3", "node_rank": 3}],
                    "came": [{"name": "node4", "node_rank": 4}],
                    "size": 4,
                },
            ),
            ("join", {"spare": {"name": "node4", "node_rank": 4}, "restart": 1}),
        ],
    ),
    (
        "a restart without a spare: no join",
        RECOVER,
        TRAINING,
        Joined(restart=1, size=3, left=(N3,)),
        [
            ("round", {"restart": 1, "size": 3, "spares": 0}),
            (
                "restart",
                {"restart": 1, "left": [{"name": "node3", "node_rank": 3}], "came": [], "size": 3},
            ),
        ],
    ),
    (
        "a round torch re-formed without recovery: a round, no restart",
        PLAIN,
        TRAINING,
        Joined(size=4),
        [("round", {"restart": 0, "size": 4, "spares": 0})],
    ),
    (
        "a node lost, the job goes on",
        RECOVER,
        TRAINING,
        lost(left=True),
        [("lost", lost_fields("restart"))],
    ),
    (
        "a node lost with no restarts left: lost, then the stop",
        RECOVER,
        TRAINING,
        lost(left=False),
        [
            ("lost", lost_fields("stop")),
            (
                "stop",
                {
                    "cause": "node3 (node rank 3) has not been heard from for 61 s"
                    " (TORCHRUN_JSC_PEER_TIMEOUT=60); cannot go on: no restarts left"
                    " (--max_restarts=3)"
                },
            ),
        ],
    ),
    (
        "told to stop",
        PLAIN,
        TRAINING,
        ToldToStop(None),
        [("stop", {"cause": "another node stopped the job"})],
    ),
    ("the monitor's look", PLAIN, TRAINING, MonitorLooks(), []),
    ("a store that answers", PLAIN, TRAINING, StoreQuiet(0.0, 1.0, 2000.0), []),
]


@pytest.mark.parametrize(
    "config, state, event, expected", [row[1:] for row in TABLE], ids=[r[0] for r in TABLE]
)
def test_the_events_logged(
    config: Config, state: State, event: Event, expected: List[Tuple[str, Dict[str, Any]]]
) -> None:
    _, actions = decide(config, state, event)
    assert logs(actions) == expected


def test_the_first_round_after_a_handover_logs_the_handover_first() -> None:
    previous = Handover(
        endpoint="10.0.0.2:29500",
        host_node_rank=1,
        restart=1,
        lost="the rendezvous host node0i:29500",
        wait=130.0,
        lost_nodes=(0,),
    )
    config = RECOVER._replace(failover=True, previous=previous)
    _, actions = decide(config, State(), Joined(restart=1, size=3))
    assert logs(actions) == [
        (
            "handover",
            {"lost": "the rendezvous host node0i:29500", "restart": 1, "lost_nodes": [0]},
        ),
        ("round", {"restart": 1, "size": 3, "spares": 0}),
    ]


def test_a_restart_already_said_logs_its_round_once_more_but_no_restart() -> None:
    state = TRAINING._replace(restarts=1)
    _, actions = decide(RECOVER, state, Joined(restart=1, size=4))
    assert [e for e, _ in logs(actions)] == ["round"]


def test_every_logged_event_is_a_documented_one() -> None:
    from torchrun_jsc.runtime.events.entry import EVENTS

    for _, config, state, event, _ in TABLE:
        _, actions = decide(config, state, event)
        assert all(a.event in EVENTS for a in actions if isinstance(a, Log))
