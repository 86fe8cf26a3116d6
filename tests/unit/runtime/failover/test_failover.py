"""Failover, by tables: which node hosts next (from the round's member keys), the handover
carried to the next process, and the job watch's decision when the rendezvous host is lost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from tests.unit.fakestore import FakeStore
from tests.unit.layouts import ib
from tests.unit.runtime.watch.test_machine_recovery import RECOVER
from tests.unit.sessions import with_store
from torchrun_jsc import handover
from torchrun_jsc.errors import ConfigError
from torchrun_jsc.handover import Candidate, Handover
from torchrun_jsc.patches.rank_order import encode as rank_id
from torchrun_jsc.runtime.failover import relaunch
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.watch.machine import decide
from torchrun_jsc.runtime.watch.vocabulary import (
    Action,
    Config,
    HandOver,
    Joined,
    Log,
    LookUpNextHost,
    Member,
    MembersLost,
    NextHosts,
    Phase,
    Say,
    SetRestarts,
    SpareFound,
    State,
    StoreQuiet,
    WorkersEnded,
)


def key(i: int, rank: Optional[int] = None, pid: int = 4000) -> str:
    """A member's store key as the session makes it (address, pid, local id)."""
    local_id = 0 if rank is None else rank_id(rank, 0)
    return f"{ib(i)}_{pid + i}_{local_id}"


#: Round members in torch's order (address strings), each carrying its node rank.
MEMBERS = [key(i, i) for i in (3, 0, 2, 1)]


def names(found: Tuple[Candidate, ...]) -> List[Optional[int]]:
    return [c.node_rank for c in found]


@pytest.mark.parametrize(
    ("members", "hosts", "lost", "wanted"),
    [
        (MEMBERS, (ib(0),), (), [1, 2, 3]),
        (MEMBERS, (ib(2),), (), [0, 1, 3]),
        (MEMBERS, (ib(0),), (key(1, 1),), [2, 3]),
        ([key(0, 0)], (ib(0),), (), []),
    ],
    ids=["the host left out", "the host is node rank 2", "lost members left out", "nobody"],
)
def test_who_hosts_next(
    members: List[str], hosts: Tuple[str, ...], lost: Tuple[str, ...], wanted: List[int]
) -> None:
    assert names(handover.order(members, hosts, lost)) == wanted


def test_without_node_ranks_the_round_order_is_kept() -> None:
    members = [key(3), key(1), key(2)]
    found = handover.order(members, (ib(0),))
    assert [c.address for c in found] == [ib(3), ib(1), ib(2)]
    assert [c.node_rank for c in found] == [None, None, None]


def test_a_member_key_is_read_back() -> None:
    assert handover.member(key(1, 1)) == Candidate(key(1, 1), ib(1), 1)
    assert handover.member("fd00:78::11_77_0") == Candidate("fd00:78::11_77_0", "fd00:78::11", None)


@pytest.mark.parametrize(
    ("address", "text"),
    [("10.78.0.11", "10.78.0.11:29500"), ("fd00:78::11", "[fd00:78::11]:29500")],
)
def test_the_next_endpoint_keeps_the_port(address: str, text: str) -> None:
    assert handover.endpoint(address, 29500) == text


HANDED = Handover(
    endpoint="10.78.0.11:29500",
    host_node_rank=1,
    restart=2,
    lost="the rendezvous host node0i:29500",
    wait=150.0,
    spare=True,
    lost_nodes=(0,),
)


def test_the_handover_travels_whole() -> None:
    assert handover.decode(handover.encode(HANDED)) == HANDED
    assert (
        handover.decode(handover.encode(HANDED._replace(host_node_rank=None))).host_node_rank
        is None
    )


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("not json", "not JSON"),
        ("[1]", "not the expected object"),
        (handover.encode(HANDED).replace('"wait":150.0', '"wait":0'), "wait 0 is not valid"),
        (handover.encode(HANDED).replace('"restart":2', '"restart":true'), "restart true"),
        (handover.encode(HANDED).replace('"host_node_rank":1', '"host_node_rank":-1'), "-1"),
        (handover.encode(HANDED).replace('"spare":true', '"spare":1'), "spare 1 is not valid"),
        (handover.encode(HANDED).replace('"lost_nodes":[0]', '"lost_nodes":[-1]'), "[-1]"),
        (handover.encode(HANDED).replace('"lost_nodes":[0]', '"lost_nodes":0'), "lost_nodes 0"),
    ],
)
def test_a_broken_handover_is_refused_in_one_line(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        handover.decode(value)
    text = str(info.value)
    assert "\n" not in text and why in text and "; accepted: the JSON object" in text


# ---------------------------------------------------------------------------- the watch

FAILOVER = RECOVER._replace(
    hostname="node2",
    node_rank=2,
    failover=True,
    store_port=29500,
    host_node_rank=0,
    host_addresses=(ib(0),),
)
NEXT = handover.order(MEMBERS, (ib(0),))
TRAINING = State(phase=Phase.TRAINING, next_hosts=NEXT, round_size=4)
#: The host silent for 61 s (its operation in flight hung for the peer timeout).
SILENT = StoreQuiet(stuck=61.0, silent=61.0, now=5000.0)


def kinds(actions: Tuple[Action, ...]) -> List[str]:
    """The actions' kinds but the event log's (``watch/test_machine_events.py`` has those)."""
    return [type(a).__name__ for a in actions if not isinstance(a, Log)]


def said(actions: Tuple[Action, ...]) -> str:
    return " | ".join(a.line for a in actions if isinstance(a, Say))


def test_a_lost_host_hands_over_to_the_next_node_in_node_rank_order() -> None:
    state, actions = decide(FAILOVER, TRAINING, SILENT)
    assert state.phase == Phase.HANDING_OVER and state.out and not state.failed
    assert kinds(actions) == ["Say", "HandOver"]
    handed = actions[1]
    assert isinstance(handed, HandOver)
    assert handed.handover == Handover(
        endpoint=f"{ib(1)}:29500",
        host_node_rank=1,
        restart=1,
        lost="the rendezvous host node0i:29500",
        wait=150.0,
        spare=False,
        quorum=3,
        lost_nodes=(0,),
    )
    assert said(actions) == (
        "torchrun_jsc: the rendezvous host node0i:29500 has not answered for 61 s"
        " (TORCHRUN_JSC_PEER_TIMEOUT=60); handing over: node rank 1 at 10.78.0.11:29500 hosts"
        " the next round (restart 1 of 3); this node stops its workers and starts its agent"
        " again"
    )
    # further news changes nothing while the agent starts again
    assert decide(FAILOVER, state, SILENT) == (state, ())


def test_a_second_handover_carries_every_lost_host_on() -> None:
    """The store that knew of node rank 0's loss is gone: the handover remembers it."""
    config = FAILOVER._replace(host_node_rank=1, previous=HANDED)
    nxt = handover.order(MEMBERS, (ib(0), ib(1)))
    _, actions = decide(config, TRAINING._replace(next_hosts=nxt), SILENT)
    handed = actions[-1]
    assert isinstance(handed, HandOver)
    assert handed.handover.lost_nodes == (0, 1) and handed.handover.host_node_rank == 2


def test_a_handover_carries_the_nodes_that_left_earlier_rounds_on() -> None:
    """node3 left an earlier round (a spare took its place); the host is lost now: the next
    process must leave node3 out of a requeue too, and once, whatever came before."""
    departed = (Member("node3", 3), Member("10.0.0.9_7_0"))  # one never said who it is
    state = TRAINING._replace(next_hosts=NEXT, departed=departed)
    handed = decide(FAILOVER, state, SILENT)[1][-1]
    assert isinstance(handed, HandOver) and handed.handover.lost_nodes == (3, 0)
    config = FAILOVER._replace(host_node_rank=1, previous=HANDED._replace(lost_nodes=(0, 3)))
    nxt = handover.order(MEMBERS, (ib(0), ib(1)))
    again = decide(config, state._replace(next_hosts=nxt), SILENT)[1][-1]
    assert isinstance(again, HandOver) and again.handover.lost_nodes == (0, 3, 1)


def test_a_spare_hands_over_too_and_says_so_in_its_next_process() -> None:
    state, _ = decide(FAILOVER, State(), SpareFound(size=4, next_hosts=NEXT))
    assert state.phase == Phase.SPARE and state.next_hosts == NEXT
    _, actions = decide(FAILOVER, state, SILENT)
    handed = actions[-1]
    assert isinstance(handed, HandOver) and handed.handover.spare


@pytest.mark.parametrize(
    ("name", "config", "state", "why"),
    [
        (
            "no restarts left",
            FAILOVER,
            TRAINING._replace(restarts=3),
            "cannot go on: no restarts left (--max_restarts=3)",
        ),
        (
            "nobody left to host",
            FAILOVER,
            TRAINING._replace(next_hosts=()),
            "cannot go on: no other node of the last round is left to host the rendezvous",
        ),
        (
            "the majority of the job's nodes is more than a round may have",
            FAILOVER._replace(max_nodes=2),
            TRAINING._replace(round_size=2, round_spares=2),
            "cannot go on: going on without the rendezvous host needs 3 of the job's 4 nodes"
            " (a majority), more than a round may have (--nnodes' maximum, 2)",
        ),
        ("failover off", FAILOVER._replace(failover=False), TRAINING, None),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_when_it_cannot_hand_over_the_job_stops_as_before(
    name: str, config: Config, state: State, why: Optional[str]
) -> None:
    new, actions = decide(config, state, SILENT)
    assert new.phase == Phase.STOPPING and new.failed
    assert kinds(actions) == ["ZeroRestarts", "Publish", "Say", "StopWorkers"]
    line = said(actions)
    assert line.startswith("torchrun_jsc: the rendezvous host node0i:29500 has not answered")
    assert (why in line) if why else ("cannot go on" not in line)


@pytest.mark.parametrize(
    ("size", "spares", "quorum"), [(4, 0, 3), (4, 1, 3), (3, 2, 3), (4, 2, 4), (1, 0, 1)]
)
def test_the_next_round_needs_a_majority_of_the_last_rounds_members_and_spares(
    size: int, spares: int, quorum: int
) -> None:
    """Without the host a group goes on only with a strict majority of the job's nodes at the
    last round (the spares known then included): the host's group may go on with half."""
    state = TRAINING._replace(round_size=size, round_spares=spares)
    handed = decide(FAILOVER._replace(max_nodes=4), state, SILENT)[1][-1]
    assert isinstance(handed, HandOver) and handed.handover.quorum == quorum


def test_a_round_says_the_spares_the_job_had_and_the_watch_keeps_them() -> None:
    state, _ = decide(FAILOVER, State(), Joined(size=4, next_hosts=NEXT, spares=2))
    assert (state.round_size, state.round_spares) == (4, 2)
    spare, _ = decide(FAILOVER, State(), SpareFound(size=3, next_hosts=NEXT, spares=1))
    assert (spare.round_size, spare.round_spares) == (3, 1)


def test_a_member_lost_before_the_host_is_no_candidate() -> None:
    lost = MembersLost((key(1, 1),), "node1", 1, 61.0, 1.0, True, members=4, spares=1)
    state, _ = decide(FAILOVER, TRAINING, lost)
    assert [c.node_rank for c in state.next_hosts] == [2, 3]


def test_the_next_process_says_the_restart_once_the_round_forms() -> None:
    config = FAILOVER._replace(previous=HANDED._replace(spare=False, restart=1))
    state, actions = decide(config, State(), Joined(restart=1, size=4, next_hosts=NEXT))
    assert state.phase == Phase.TRAINING and state.restarts == 1
    assert said(actions) == (
        "torchrun_jsc: restart 1 of 3: the rendezvous host node0i:29500 lost; going on with 4"
        " nodes, node rank 1 at 10.78.0.11:29500 hosting the rendezvous"
    )
    assert SetRestarts(2) in actions


def test_a_spare_that_handed_over_says_it_takes_a_place() -> None:
    config = FAILOVER._replace(previous=HANDED._replace(restart=1))
    _, actions = decide(config, State(), Joined(restart=1, size=4))
    assert "spare: this node takes a lost node's place (restart 1 of 3; 4 nodes)" in said(actions)


def test_a_later_round_of_the_next_process_is_an_ordinary_restart() -> None:
    config = FAILOVER._replace(previous=HANDED._replace(spare=False, restart=1))
    state = TRAINING._replace(restarts=1)
    event = Joined(restart=2, size=3, left=(Member("node3", 3),))
    _, actions = decide(config, state, event)
    assert said(actions) == (
        "torchrun_jsc: restart 2 of 3: node3 (node rank 3) lost; going on with 3 nodes"
    )


def test_the_host_is_left_out_by_its_node_rank_when_keys_carry_hostnames() -> None:
    # torch < 2.0 names a node by its hostname in the key: the host is found by its rank
    members = [f"node{i}_{4000 + i}_{rank_id(i, 0)}" for i in range(4)]
    found = handover.order(members, (ib(0),), host_rank=0)
    assert [c.node_rank for c in found] == [1, 2, 3]
    assert found[0].address == "node1"


def test_the_published_address_replaces_the_keys_unless_a_newer_round_came() -> None:
    published = (NEXT[0]._replace(address="10.78.0.99"), *NEXT[1:])
    event = NextHosts(before=NEXT, found=published)
    state, actions = decide(FAILOVER, TRAINING, event)
    assert state.next_hosts == published and actions == ()
    newer = TRAINING._replace(next_hosts=NEXT[1:])
    assert decide(FAILOVER, newer, event) == (newer, ())


# ---------------------------------------------------------------------------- the session


def failover_session(members: List[str]) -> Tuple[Session, FakeStore]:
    session = Session(
        Config(
            hostname="node2",
            node_rank=2,
            store_port=29500,
            peer_timeout=10.0,
            recovery=True,
            min_nodes=4,
            max_restarts=3,
            failover=True,  # started by the command
            host_node_rank=0,
            host_addresses=(ib(0),),
            address=ib(2),
        ),
        Workers(),
    )
    store = with_store(session)
    session.members = members
    return session, store


def test_the_session_learns_the_next_hosts_own_address() -> None:
    session, _ = failover_session(MEMBERS)
    protocol = session.protocol
    assert protocol is not None
    hosts = session._next_hosts(MEMBERS)
    session.post(Joined(size=4, next_hosts=hosts))
    # node1 publishes a different address than its key holds (torch < 2.0: its hostname)
    protocol.introduce(key(1, 1), "node1", 1, "10.78.0.71")
    deadline = time.monotonic() + 5
    while session.state.next_hosts[0].address != "10.78.0.71":
        assert time.monotonic() < deadline, session.state.next_hosts
        time.sleep(0.05)
    assert [c.node_rank for c in session.state.next_hosts] == [1, 2, 3]
    session.closing.set()


def test_a_candidate_that_published_the_hosts_address_is_skipped() -> None:
    session, _ = failover_session(MEMBERS)
    protocol = session.protocol
    assert protocol is not None
    protocol.introduce(key(1, 1), "node1", 1, ib(0))
    protocol.introduce(key(2, 2), "node2", 2, ib(2))
    session.post(Joined(size=4, next_hosts=session._next_hosts(MEMBERS)))
    deadline = time.monotonic() + 5
    while session.state.next_hosts[0].node_rank != 2:
        assert time.monotonic() < deadline, session.state.next_hosts
        time.sleep(0.05)
    session.closing.set()


def test_the_next_process_gets_the_same_command_and_the_handover() -> None:
    args, env = ["--nnodes=4", "train.py"], {"PATH": "/bin", "A": "1"}
    started = relaunch.Command.of(args, env)
    args.append("later")
    env["A"] = "2"  # what changes after the start is not the command's
    assert started == relaunch.Command("", ("--nnodes=4", "train.py"), {"PATH": "/bin", "A": "1"})
    assert relaunch.command(started.args, started.program)[1:] == [
        "-m",
        "torchrun_jsc",
        "--nnodes=4",
        "train.py",
    ]
    after = relaunch.environment(started.env, HANDED)
    assert handover.decode(after[handover.VARIABLE]) == HANDED and after["A"] == "1"


def test_a_node_restarting_its_workers_hands_over_too() -> None:
    restarting = TRAINING._replace(phase=Phase.RESTARTING, restarts=1)
    state, actions = decide(FAILOVER, restarting, SILENT)
    assert state.phase == Phase.HANDING_OVER
    handed = actions[-1]
    assert isinstance(handed, HandOver) and handed.handover.restart == 2


def test_workers_that_end_during_the_handover_change_nothing() -> None:
    state, _ = decide(FAILOVER, TRAINING, SILENT)
    for ended in (WorkersEnded(True, True), WorkersEnded(False, True)):
        assert decide(FAILOVER, state, ended) == (state, ())


def test_a_node_whose_workers_finished_does_not_hand_over() -> None:
    finished = TRAINING._replace(phase=Phase.FINISHED, succeeded=True)
    state, actions = decide(FAILOVER, finished, SILENT)
    assert state.phase == Phase.LEAVING
    assert "cannot go on: this node's part of the job is over" in said(actions)


def test_a_thawed_node_ends_instead_of_handing_over() -> None:
    thawed = StoreQuiet(stuck=0.0, silent=70.0, now=5000.0, paused=70.0)
    state, actions = decide(FAILOVER, TRAINING, thawed)
    assert state.phase == Phase.STOPPING
    assert "HandOver" not in kinds(actions)
    assert "this node did not run for 70 s" in said(actions)


def test_a_spare_follows_the_rounds_and_hands_over_with_the_jobs_count() -> None:
    state, _ = decide(FAILOVER, State(), SpareFound(size=4, next_hosts=NEXT))
    later = NEXT[1:]
    state, actions = decide(FAILOVER, state, SpareFound(size=4, next_hosts=later, restart=2))
    assert state.phase == Phase.SPARE and state.next_hosts == later and state.restarts == 2
    assert kinds(actions) == ["LookUpNextHost"]
    _, actions = decide(FAILOVER, state, SILENT)
    handed = actions[-1]
    assert isinstance(handed, HandOver)
    assert handed.handover.restart == 3 and handed.handover.host_node_rank == 2


def test_a_round_with_candidates_asks_for_the_first_ones_address() -> None:
    _, actions = decide(FAILOVER, State(), Joined(size=4, next_hosts=NEXT))
    assert LookUpNextHost(NEXT) in actions
    _, actions = decide(FAILOVER, State(), Joined(size=4))
    assert "LookUpNextHost" not in kinds(actions)


def test_the_rounds_of_the_next_process_count_on_from_the_handover() -> None:
    from torchrun_jsc.runtime.recovery.rounds import Rounds
    from torchrun_jsc.runtime.store.protocol import JobProtocol

    protocol = JobProtocol(FakeStore())
    rounds = Rounds(protocol, offset=2)
    assert rounds.joined([], ["a", "b"], 0, serving=True).restart == 2
    later = rounds.joined(["a", "b"], ["a"], 1, serving=True)
    assert later.restart == 3 and protocol.restart() == 3


def test_the_console_script_is_started_again_as_a_script(tmp_path: Path) -> None:
    script = tmp_path / "torchrun_jsc"
    script.write_text("#!python\n")
    assert relaunch.command(["a"], str(script))[1:] == [str(script), "a"]
    main = tmp_path / "__main__.py"
    main.write_text("")
    assert relaunch.command(["a"], str(main))[1:] == ["-m", "torchrun_jsc", "a"]


def test_a_node_that_did_not_run_meanwhile_does_not_hand_over() -> None:
    """Frozen for 50 s (less than the peer timeout): torch's keep-alives dropped it and the
    job went on, and ended, without it; the host's silence since is no host lost."""
    thawed = StoreQuiet(stuck=0.0, silent=50.0, now=5000.0, paused=50.0)
    state, actions = decide(FAILOVER, TRAINING, thawed)
    assert actions == () and state.paused_until == 5000.0 and state.paused_for == 50.0
    state, actions = decide(FAILOVER, state, StoreQuiet(stuck=0.0, silent=66.0, now=5016.0))
    assert state.phase == Phase.STOPPING and "HandOver" not in kinds(actions)
    assert "cannot go on: this node itself did not run for 50 s meanwhile" in said(actions)


def test_a_pause_before_the_silence_does_not_stop_a_handover() -> None:
    earlier = TRAINING._replace(paused_until=4000.0, paused_for=8.0)
    _, actions = decide(FAILOVER, earlier, SILENT)  # silent since 4939
    assert "HandOver" in kinds(actions)
