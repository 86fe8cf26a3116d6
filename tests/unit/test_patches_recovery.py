"""The recovery patches on the installed torch: a spare's join deadline renewed beside a full
round (spare_wait), and a node that is out not closing the rendezvous (recovery)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Iterator, List

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import params
from torchrun_jsc.runtime import agent
from torchrun_jsc.runtime.watch.vocabulary import Config

pytest.importorskip("torch")
from torch.distributed.elastic.rendezvous import dynamic_rendezvous


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    patches.restore_all()


def _ctx(participants: List[str], complete: bool = True, max_nodes: int = 2) -> Any:
    state = SimpleNamespace(complete=complete, participants=dict.fromkeys(participants, 0))
    settings = SimpleNamespace(max_nodes=max_nodes, timeout=SimpleNamespace(join=timedelta(600)))
    return SimpleNamespace(state=state, settings=settings, node="spare")


def test_a_spare_beside_a_full_round_gets_its_deadline_renewed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: List[float] = []

    def recorder(self: Any, ctx: Any, deadline: float) -> str:
        seen.append(deadline)
        return "SYNC"

    monkeypatch.setattr(dynamic_rendezvous._RendezvousJoinOp, "__call__", recorder)
    assert patches.install(params.SpareWait()) is None
    op = dynamic_rendezvous._RendezvousJoinOp()
    op(_ctx(["a", "b"]), 5.0)  # full and complete, not in it: renewed
    assert seen[-1] > 5.0 + 600 - 1
    op(_ctx(["a"]), 5.0)  # a place opened: counted from the last moment beside a full round
    assert seen[-1] == seen[-2]
    fresh = dynamic_rendezvous._RendezvousJoinOp()
    fresh(_ctx(["a"]), 5.0)  # never beside a full round: torch's own deadline
    assert seen[-1] == 5.0
    fresh(_ctx(["a", "b"], complete=False), 5.0)
    assert seen[-1] == 5.0


def test_a_node_that_is_out_does_not_close_the_rendezvous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: List[str] = []
    monkeypatch.setattr(
        dynamic_rendezvous.DynamicRendezvousHandler, "shutdown", lambda self: closed.append("x")
    )
    config = Config(
        hostname="node1",
        node_rank=1,
        store_host="h",
        store_port=1,
        run_id="r",
        peer_timeout=10.0,
        recovery=True,
        min_nodes=3,
        max_restarts=2,
    )
    assert patches.install(params.JobWatch(config=config)) is None
    assert patches.install(params.Recovery()) is None
    handler: Any = object.__new__(dynamic_rendezvous.DynamicRendezvousHandler)
    handler.shutdown()
    assert closed == ["x"]
    session = agent.runtime().session
    assert session is not None and session.config == config
    session.state = session.state._replace(out=True)
    assert handler.shutdown() is False and closed == ["x"]


@pytest.mark.parametrize("started", [True, False], ids=["by-the-command", "apply-fixes"])
def test_failover_is_on_only_in_a_process_the_command_started(started: bool) -> None:
    """The plan switches failover on; the job watch keeps it only where this process can start
    itself again (``apply_fixes()`` in a script of one's own cannot)."""
    from torchrun_jsc.runtime.failover.relaunch import Command

    if started:
        agent.runtime().command = Command.of(["train.py"], {})
    config = Config(hostname="node1", peer_timeout=10.0, recovery=True, failover=True)
    assert patches.install(params.JobWatch(config=config)) is None
    session = agent.runtime().session
    assert session is not None and session.config == config._replace(failover=started)
