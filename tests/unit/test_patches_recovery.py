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


def test_the_job_watch_is_made_of_the_runtimes_parts() -> None:
    """One runtime object: the session the job_watch patch makes shares the process's workers,
    stop signals and start command."""
    from torchrun_jsc.runtime.failover.relaunch import Command

    runtime = agent.runtime()
    runtime.command = Command.of(["train.py"], {})
    assert patches.install(params.JobWatch(config=Config(hostname="node1"))) is None
    session = runtime.session
    assert session is not None
    assert (session.workers, session.stops, session.command) == (
        runtime.workers,
        runtime.stops,
        runtime.command,
    )


def test_the_requeue_declines_without_the_job_watch_it_is_part_of() -> None:
    from torchrun_jsc.runtime.requeue.decision import Budget

    budget = Budget(job="12", done=0, most=3, min_run=600.0, grace=60.0, signal="SIGUSR1")
    reason = patches.install(params.Requeue(budget=budget))
    assert reason is not None and "job watch" in reason


def test_torchs_hooks_follow_the_runtimes_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hooks read the runtime's session at each call: with the runtime dropped, torch's
    own call runs as it is."""
    from torch.distributed.elastic.agent.server import api

    seen: List[str] = []

    def rendezvous(self: Any, worker_group: Any) -> None:
        seen.append("torch")

    monkeypatch.setattr(api.SimpleElasticAgent, "_rendezvous", rendezvous)
    assert patches.install(params.JobWatch(config=Config(hostname="node1"))) is None
    session = agent.runtime().session
    assert session is not None
    monkeypatch.setattr(session, "before_rendezvous", lambda a, g: seen.append("before"))
    monkeypatch.setattr(session, "after_rendezvous", lambda a, g: seen.append("after"))
    hooked: Any = api.SimpleElasticAgent._rendezvous
    hooked(object(), object())
    assert seen == ["before", "torch", "after"]
    agent.forget()  # the runtime dropped while the hook stays
    hooked(object(), object())
    assert seen == ["before", "torch", "after", "torch"]
