"""The rendezvous host keeps its place in every round: the pure decision (a table), the host's
key in the store, and the join operation of the installed torch with the patch."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Iterator, List, Optional

import pytest

from tests.unit.fakestore import FakeStore
from torchrun_jsc import patches
from torchrun_jsc.patches import params
from torchrun_jsc.runtime import agent
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.recovery.host_place import Place, gave_up_line, place
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import Config, Phase

JOIN, HOLD, GIVE_UP = Place.JOIN, Place.HOLD, Place.GIVE_UP

#: (what, me, host, members, min_nodes, held, expected); the bound is 10 s.
TABLE = [
    ("the host itself joins", "h", None, [], 4, 0.0, JOIN),
    ("the host joins even as the last place", "h", None, ["a", "b", "c"], 4, 0.0, JOIN),
    ("the host is in: the others join", "a", "h", ["h"], 4, 0.0, JOIN),
    ("the host is in: the last place too", "c", "h", ["h", "a", "b"], 4, 0.0, JOIN),
    ("places short of the quorum are free", "a", "h", [], 4, 0.0, JOIN),
    ("the place before the quorum is free", "b", "h", ["a"], 4, 0.0, JOIN),
    ("the quorum's last place is the host's", "c", "h", ["a", "b"], 3, 0.0, HOLD),
    ("a full round without the host: held", "d", "h", ["a", "b", "c"], 4, 5.0, HOLD),
    ("--nnodes=1:4: the host comes first", "a", "h", [], 1, 0.0, HOLD),
    ("the host has not said its key yet", "c", "", ["a", "b"], 3, 0.0, HOLD),
    ("not yet said, short of the quorum", "a", "", [], 4, 0.0, JOIN),
    ("held for the bound: torch's order", "c", "h", ["a", "b"], 3, 10.0, GIVE_UP),
    ("held just short of the bound", "c", "h", ["a", "b"], 3, 9.9, HOLD),
]
#: (what, seconds to torch's deadline, expected) for a node holding the quorum's last place.
NEAR = [
    ("far from torch's deadline", 600.0, HOLD),
    ("just outside the margin", 10.5, HOLD),
    ("within the margin: it joins before torch times it out", 10.0, GIVE_UP),
    ("past it", -1.0, GIVE_UP),
]


@pytest.mark.parametrize(
    "me, host, members, min_nodes, held, expected",
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_place(
    me: str, host: Optional[str], members: List[str], min_nodes: int, held: float, expected: Place
) -> None:
    assert place(me, host, members, min_nodes, held, 10.0) == expected


@pytest.mark.parametrize("left, expected", [r[1:] for r in NEAR], ids=[r[0] for r in NEAR])
def test_a_held_node_joins_before_torchs_deadline(left: float, expected: Place) -> None:
    assert place("c", "h", ["a", "b"], 3, 1.0, 10.0, left) == expected


def test_the_line_of_a_node_that_gave_up_names_the_bound_and_the_cost() -> None:
    line = gave_up_line(60.0)
    assert line.startswith("torchrun_jsc: the rendezvous host has not joined the round for 60 s")
    assert "cannot watch the nodes" in line


def _session(store: FakeStore, is_host: Optional[bool], recovery: bool = True) -> Session:
    config = Config(hostname="node1", node_rank=1, is_host=is_host, run_id="r", peer_timeout=10.0)
    if recovery:
        config = config._replace(recovery=True, min_nodes=3, max_restarts=3)
    s = Session(config, Workers())
    s.protocol = JobProtocol(store)
    return s


def test_the_host_says_its_key_before_it_joins_and_the_others_read_it() -> None:
    store = FakeStore()
    host, other = _session(store, True), _session(store, False)
    assert other.host_member() == ""  # not said yet: the others hold the quorum's place
    this = SimpleNamespace(addr="10.0.0.1", pid=7, local_id=0)
    handler = SimpleNamespace(_this_node=this)
    group = SimpleNamespace(spec=SimpleNamespace(rdzv_handler=handler))
    host.before_rendezvous(object(), group)
    host.closing.set()  # the spare look this starts ends at once
    assert other.host_member() == "10.0.0.1_7_0"
    assert host.host_member() is None  # the host keeps no place for itself
    assert _session(store, None).host_member() is None  # not known which node hosts
    assert _session(store, False, recovery=False).host_member() is None


def test_a_spare_torch_ends_before_it_said_so_ends_with_the_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch ends an agent in its redundancy list with RendezvousGracefulExitError when the job
    completes; one that had not found itself a spare yet ends as a spare, not in a crash."""
    session = _session(FakeStore(), False)
    codes: List[int] = []
    monkeypatch.setattr("os._exit", codes.append)

    class RendezvousClosedError(Exception):
        pass

    class RendezvousGracefulExitError(Exception):
        pass

    session.rendezvous_failed(RendezvousClosedError())  # not a spare: torch's to handle
    assert codes == [] and session.state.phase == Phase.WAITING
    session.rendezvous_failed(RendezvousGracefulExitError())
    assert codes == [0]
    assert "spare: the job completed without needing this node" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the patch

pytest.importorskip("torch")
from torch.distributed.elastic.rendezvous import dynamic_rendezvous  # noqa: E402

_Action = dynamic_rendezvous._Action


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[str]]:
    """The patch over a join operation that always asks to be added; the host's key as the
    session answers it (a list the test fills)."""
    host: List[str] = []
    monkeypatch.setattr(
        dynamic_rendezvous._RendezvousJoinOp,
        "__call__",
        lambda self, ctx, deadline: _Action.ADD_TO_PARTICIPANTS,
    )
    watch = agent.runtime().watch(Config(hostname="node1", is_host=False, peer_timeout=0.3))
    monkeypatch.setattr(watch, "host_member", lambda: host[0] if host else None)
    assert patches.install(params.HostInRound()) is None
    yield host
    patches.restore_all()
    agent.forget()


def _ctx(me: str, members: List[str], min_nodes: int = 3) -> Any:
    def node(key: str) -> Any:
        return dynamic_rendezvous._NodeDesc(key, 1, 0)

    state = SimpleNamespace(participants={node(m): 0 for m in members})
    settings = SimpleNamespace(min_nodes=min_nodes, timeout=SimpleNamespace(join=timedelta(600)))
    return SimpleNamespace(node=node(me), state=state, settings=settings)


def test_the_patched_join_holds_the_quorums_place_for_the_host(
    installed: List[str], capsys: pytest.CaptureFixture[str]
) -> None:
    installed.append("h_1_0")
    op = dynamic_rendezvous._RendezvousJoinOp()
    assert op(_ctx("a", []), 1e9) == _Action.ADD_TO_PARTICIPANTS
    assert op(_ctx("c", ["a", "b"]), 1e9) == _Action.SYNC  # torch looks again in a second
    assert op(_ctx("c", ["a", "b", "h"]), 1e9) == _Action.ADD_TO_PARTICIPANTS
    time.sleep(0.35)  # held for the bound (0.3 s): torch's order, said once
    assert op(_ctx("c", ["a", "b"]), 1e9) == _Action.ADD_TO_PARTICIPANTS
    assert op(_ctx("c", ["a", "b"]), 1e9) == _Action.ADD_TO_PARTICIPANTS
    assert capsys.readouterr().err.count("has not joined the round for 0.3 s") == 1
    fresh = dynamic_rendezvous._RendezvousJoinOp()  # the next round's join: held again
    assert fresh(_ctx("c", ["a", "b"]), 1e9) == _Action.SYNC


def test_the_patched_join_leaves_the_host_and_other_actions_alone(
    installed: List[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    op = dynamic_rendezvous._RendezvousJoinOp()
    assert op(_ctx("h", ["a", "b"]), 1e9) == _Action.ADD_TO_PARTICIPANTS  # the host: None
    installed.append("h_1_0")
    patches.restore_all()
    monkeypatch.setattr(
        dynamic_rendezvous._RendezvousJoinOp, "__call__", lambda self, ctx, deadline: _Action.FINISH
    )
    assert patches.install(params.HostInRound()) is None
    assert op(_ctx("c", ["a", "b"]), 1e9) == _Action.FINISH
