"""The runtime patches, installed into the real (installed) torch and undone after each test."""

from __future__ import annotations

import socket
import subprocess
from typing import Any, Iterator

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import _common, params

rdzv_utils = pytest.importorskip("torch.distributed.elastic.rendezvous.utils")


@pytest.fixture(autouse=True)
def undo() -> Iterator[None]:
    yield
    patches.restore_all()


def no_name_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine is ``testbox`` at 10.78.0.10 and no other name resolves: torch's host
    recognition looks names up, and unit tests must not need a resolver or a network."""

    def getaddrinfo(host: str, *args: object, **kw: object) -> object:
        if host == "testbox":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "testbox", ("10.78.0.10", 0))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "gethostname", lambda: "testbox")
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_host_matcher_patches_both_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    no_name_service(monkeypatch)
    original = rdzv_utils._matches_machine_hostname
    assert original("node0i-not-here") is False
    assert patches.install(params.HostMatcher(host="node0i-not-here", is_local=True)) is None
    assert rdzv_utils._matches_machine_hostname("node0i-not-here") is True
    assert backend._matches_machine_hostname("node0i-not-here") is True
    assert backend._matches_machine_hostname("localhost") is True, "others: torch decides"
    patches.restore_all()
    assert rdzv_utils._matches_machine_hostname is original
    assert backend._matches_machine_hostname is original


def test_host_matcher_can_say_no_for_the_endpoint() -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    assert patches.install(params.HostMatcher(host="localhost", is_local=False)) is None
    assert backend._matches_machine_hostname("localhost") is False


def test_node_desc_defaults_local_addr() -> None:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDescGenerator

    assert patches.install(params.NodeDesc(address="10.78.0.12")) is None
    gen = _NodeDescGenerator()
    assert gen.generate().addr == "10.78.0.12"
    assert gen.generate("given").addr == "given", "an explicit local_addr still wins"


def test_fq_hostname_returns_the_address() -> None:
    from torch.distributed.elastic.agent.server import api

    assert patches.install(params.FqHostname(address="fd00:78::c")) is None
    assert api._get_fq_hostname() == "fd00:78::c"


def test_store_info_build_declines_on_a_torch_with_another_signature() -> None:
    reason = patches.install(params.StoreInfoBuild(address="10.0.0.1"))
    assert reason is not None
    assert reason.startswith("torch.distributed.elastic.rendezvous.api.RendezvousStoreInfo.build")
    assert "expected (rank, store)" in reason


def test_store_info_build_publishes_the_address_on_a_2_4_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
    from torch.distributed.elastic.utils import distributed

    def build_2_4(rank: int, store: object) -> None:  # the 2.4 signature (a fingerprint)
        raise AssertionError("replaced")

    def get_free_port() -> int:  # torch's binds a socket: not in a unit test
        return 29517

    monkeypatch.setattr(RendezvousStoreInfo, "build", staticmethod(build_2_4))
    monkeypatch.setattr(distributed, "get_free_port", get_free_port)
    assert patches.install(params.StoreInfoBuild(address="10.78.0.13")) is None
    store = dist.HashStore()  # in memory
    rank0 = RendezvousStoreInfo.build(0, store)
    rank1 = RendezvousStoreInfo.build(1, store)
    assert rank0.master_addr == rank1.master_addr == "10.78.0.13"
    assert rank0.master_port == rank1.master_port
    assert 0 < rank0.master_port < 65536


def test_std_from_str_declines_where_it_works() -> None:
    assert patches.install(params.StdFromStr()) == "Std.from_str already works on this Python"


def test_std_from_str_repairs_a_broken_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.api import Std

    def broken(cls: object, vm: str) -> None:  # what torch < 2.0 does on Python >= 3.11
        return None

    monkeypatch.setattr(Std, "from_str", classmethod(broken))
    assert patches.install(params.StdFromStr()) is None
    assert Std.from_str("0") == Std.NONE
    assert Std.from_str("3") == Std.ALL
    assert Std.from_str("0:3,1:0,2:1") == {0: Std.ALL, 1: Std.NONE, 2: Std.OUT}
    with pytest.raises(ValueError, match="does not match"):
        Std.from_str("4")


def test_keep_rendezvous_declines_other_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    def stop_2_4(self: Any, worker_group: Any, is_restart: bool = False) -> None:
        raise AssertionError("not called")

    def shutdown_2_13(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        raise AssertionError("not called")

    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", stop_2_4)
    reason = patches.install(params.KeepRendezvous())
    assert reason is not None and reason.endswith(
        "LocalElasticAgent._stop_workers has parameters (self, worker_group, is_restart); "
        "expected (self, worker_group)"
    )
    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", lambda self, worker_group: None)
    monkeypatch.setattr(LocalElasticAgent, "_shutdown", shutdown_2_13)
    reason = patches.install(params.KeepRendezvous())
    assert reason is not None and reason.endswith(
        "LocalElasticAgent._shutdown has parameters (self, death_sig, timeout); "
        "expected (self, death_sig)"
    )


class _Handler:
    def __init__(self) -> None:
        self.shutdowns = 0

    def shutdown(self) -> bool:
        self.shutdowns += 1
        return True


def test_keep_rendezvous_repairs_a_2_3_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2.3-shaped agent (its _stop_workers -> _shutdown closes the rendezvous) keeps the
    rendezvous open across _restart_workers once patched, and still closes it on _shutdown."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    seen: list[int] = []

    def stop_2_3(self: Any, worker_group: Any) -> None:
        self._shutdown()

    def shutdown_2_3(self: Any, death_sig: Any = None) -> None:
        if self._rdzv_handler:
            self._rdzv_handler.shutdown()

    def restart_2_3(self: Any, worker_group: Any) -> None:
        self._stop_workers(worker_group)
        seen.append(self._rdzv_handler.shutdowns if self._rdzv_handler else -1)

    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", stop_2_3)
    monkeypatch.setattr(LocalElasticAgent, "_shutdown", shutdown_2_3)
    monkeypatch.setattr(SimpleElasticAgent, "_restart_workers", restart_2_3)
    agent: Any = LocalElasticAgent.__new__(LocalElasticAgent)  # no spec needed for this
    agent._rdzv_handler = handler = _Handler()
    agent._restart_workers(None)
    assert handler.shutdowns == 1, "unpatched, a restart closes the rendezvous (the 2.3 bug)"
    try:
        assert patches.install(params.KeepRendezvous()) is None
        handler.shutdowns = 0
        agent._restart_workers(None)
        assert handler.shutdowns == 0, "patched, a restart keeps the rendezvous open"
        assert agent._rdzv_handler is handler, "the handler is back after the restart"
        agent._shutdown()
        assert handler.shutdowns == 1, "the final shutdown still closes it"
    finally:
        patches.restore_all()
    assert SimpleElasticAgent._restart_workers is restart_2_3


def test_a_changed_signature_is_declined_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server import api

    def changed(verbose: bool) -> str:
        return "x"

    monkeypatch.setattr(api, "_get_fq_hostname", changed)
    reason = patches.install(params.FqHostname(address="a"))
    assert reason == (
        "torch.distributed.elastic.agent.server.api._get_fq_hostname has parameters (verbose);"
        " expected ()"
    )
    assert api._get_fq_hostname is changed


def test_a_missing_internal_is_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server import api

    monkeypatch.delattr(api, "_get_fq_hostname")
    reason = patches.install(params.FqHostname(address="a"))
    assert (
        reason == "torch.distributed.elastic.agent.server.api._get_fq_hostname does not exist"
        " in this torch"
    )


def test_every_patch_takes_exactly_its_registered_parameters() -> None:
    """The registry and the modules agree: one module per name, and each ``install`` takes
    the fields of its parameter tuple (the plan builds the tuple; mypy checks the plan)."""
    import importlib
    import inspect
    from pathlib import Path

    modules = {
        p.stem for p in Path(patches.__file__).parent.glob("*.py") if not p.stem.startswith("_")
    }
    assert modules - {"params"} == set(params.REGISTRY)
    for name, kind in params.REGISTRY.items():
        install = importlib.import_module(f"torchrun_jsc.patches.{name}").install
        assert tuple(inspect.signature(install).parameters) == kind._fields, name


def test_every_patch_module_declares_its_checks() -> None:
    for name in patches.NAMES:
        checks = patches.checks_of(name)
        assert checks, name
        assert all(c.module.startswith("torch.") and c.target and c.accepted for c in checks), name
    assert _common.parameters(staticmethod(lambda rank, store: None)) == ("rank", "store")


# --------------------------------------------------------------------------- agent side


def test_rank_order_carries_the_node_rank_and_orders_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    from torchrun_jsc.patches import rank_order

    assert rank_order.encode(0, 0) == 1 << 16 and rank_order.encode(3, 5) == (4 << 16) | 5
    assert patches.install(params.RankOrder(node_rank=2)) is None
    desc = dr._NodeDescGenerator().generate("10.78.0.100")
    assert desc.addr == "10.78.0.100" and desc.local_id >> 16 == 3

    class Executor:  # the fields _mark_rendezvous_complete uses, as in every torch release
        _node = "x"
        _settings = type("S", (), {"run_id": "r"})()

        def __init__(self, state: Any) -> None:
            self._state = state

        def _record(self, **kw: Any) -> None:
            pass

    state = dr._RendezvousState()
    made = {
        rank: dr._NodeDesc(addr, 10 + rank, rank_order.encode(rank, 0))
        for rank, addr in enumerate(["10.78.0.98", "10.78.0.99", "10.78.0.100", "10.78.0.101"])
    }
    state.participants = {d: 0 for d in made.values()}
    dr._DistributedRendezvousOpExecutor._mark_rendezvous_complete(Executor(state))
    assert {d.addr: r for d, r in state.participants.items()} == {
        "10.78.0.98": 0,
        "10.78.0.99": 1,
        "10.78.0.100": 2,
        "10.78.0.101": 3,
    }
    assert state.complete is True
    patches.restore_all()
    state.participants = {d: 0 for d in made.values()}
    dr._DistributedRendezvousOpExecutor._mark_rendezvous_complete(Executor(state))
    order = sorted(state.participants, key=state.participants.__getitem__)
    assert [d.addr for d in order] == ["10.78.0.100", "10.78.0.101", "10.78.0.98", "10.78.0.99"]


def test_rank_order_puts_participants_without_a_node_rank_last() -> None:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    from torchrun_jsc.patches.rank_order import encode, order_key

    plain = _NodeDesc("10.0.0.1", 1, 0)
    ranked = [_NodeDesc("10.0.0.9", 2, encode(1, 0)), _NodeDesc("10.0.0.5", 3, encode(0, 0))]
    assert [d.pid for d in sorted([plain, *ranked], key=order_key)] == [3, 2, 1]


def test_wait_for_host_retries_until_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousConnectionError,
        RendezvousParameters,
    )

    from torchrun_jsc.patches import wait_for_host

    attempts: list[str] = []

    class Store:
        timeout: Any = None

        def set_timeout(self, value: Any) -> None:
            self.timeout = value

        def num_keys(self) -> int:
            return 0

    def original(params: Any) -> Any:
        attempts.append(params.config.get("read_timeout"))
        if len(attempts) < 3:
            raise RendezvousConnectionError("no host yet")
        return Store()

    monkeypatch.setattr(backend, "_create_tcp_store", original)
    monkeypatch.setattr(wait_for_host, "listening", lambda host, port, timeout: True)
    monkeypatch.setattr(wait_for_host.time, "sleep", lambda s: None)
    assert patches.install(params.WaitForHost(endpoint="node0i:29500", wait=600.0)) is None
    rdzv = RendezvousParameters("c10d", "node0i:29500", "r", 4, 4, is_host="0", read_timeout="45")
    store = backend._create_tcp_store(rdzv)
    assert attempts == ["10", "10", "10"]
    assert store.timeout.total_seconds() == 45, "the user's read_timeout is back"
    assert rdzv.config["read_timeout"] == "45"
    attempts[:] = ["x", "y"]  # the next call succeeds at once
    host = RendezvousParameters("c10d", "node0i:29500", "r", 4, 4, is_host="1")
    backend._create_tcp_store(host)
    assert attempts == ["x", "y", None], "the host is created once, its config untouched"


def test_wait_for_host_gives_up_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousConnectionError,
        RendezvousParameters,
    )

    from torchrun_jsc.patches import wait_for_host

    clock = [0.0]

    def original(params: Any) -> Any:
        clock[0] += 10
        raise RendezvousConnectionError("still no host")

    monkeypatch.setattr(backend, "_create_tcp_store", original)
    monkeypatch.setattr(wait_for_host, "listening", lambda host, port, timeout: True)
    monkeypatch.setattr(wait_for_host.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(wait_for_host.time, "sleep", lambda s: None)
    patches.install(params.WaitForHost(endpoint="h:1", wait=35.0))
    rdzv = RendezvousParameters("c10d", "h:1", "r", 2, 2, is_host="false")
    with pytest.raises(RendezvousConnectionError, match="still no host"):
        backend._create_tcp_store(rdzv)
    assert clock[0] == 40 and "read_timeout" not in rdzv.config


def test_term_grace_replaces_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.api import PContext

    seen: list[Any] = []

    def close(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        seen.append((death_sig, timeout))

    monkeypatch.setattr(PContext, "close", close)
    assert patches.install(params.TermGrace(seconds=4.5)) is None
    PContext.close(object(), "SIGTERM")  # type: ignore[arg-type]
    PContext.close(object(), None, 30)  # type: ignore[arg-type]
    assert seen == [("SIGTERM", 4.5), (None, 4.5)]


def test_worker_start_registers_and_hands_workers_to_the_watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.distributed.elastic.multiprocessing.api import SubprocessHandler

    from torchrun_jsc.runtime import agent

    started: list[Any] = []

    class Proc:
        pid = 424242
        returncode = None

    def popen(self: Any, args: Any, env: Any) -> Any:
        started.append(args)
        return Proc()

    monkeypatch.setattr(SubprocessHandler, "_popen", popen)
    runtime = agent.runtime()
    monkeypatch.setattr(
        runtime.workers, "register", lambda proc: started.append(("registered", proc.pid))
    )
    monkeypatch.setattr(runtime.orphans, "start", lambda: started.append("watcher") and None)
    monkeypatch.setattr(runtime.orphans, "tell", lambda pid: started.append(("told", pid)))
    assert patches.install(params.WorkerStart(kill_orphans=True, new_session=False)) is None
    SubprocessHandler._popen(object(), ("python", "-u", "t.py"), {})  # type: ignore[arg-type]
    assert started == [
        "watcher",
        ("python", "-u", "t.py"),
        ("registered", 424242),
        ("told", 424242),
    ]
    patches.restore_all()
    started.clear()
    monkeypatch.setattr(SubprocessHandler, "_popen", popen)
    monkeypatch.setattr(
        agent.runtime().workers, "register", lambda proc: started.append(("registered", proc.pid))
    )
    assert patches.install(params.WorkerStart(kill_orphans=False, new_session=False)) is None
    SubprocessHandler._popen(object(), ("python", "t.py"), {})  # type: ignore[arg-type]
    assert started == [("python", "t.py"), ("registered", 424242)], "no watcher when it is off"


def test_worker_start_new_session_only_for_the_known_popen_of_torch_before_2_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.distributed.elastic.multiprocessing.api import SubprocessHandler

    from torchrun_jsc.runtime import agent

    def old_popen(self: Any, args: Any, env: Any) -> Any:  # torch 1.13-2.1's names
        return subprocess.Popen(args=args, env=env, stdout=self._stdout, stderr=self._stderr)

    calls: list[dict[str, Any]] = []

    class Proc:
        pid = 4242

    def fake_popen(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return Proc()

    class Handler:
        _stdout = "out"
        _stderr = None

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    monkeypatch.setattr(agent.runtime().workers, "register", lambda proc: None)
    monkeypatch.setattr(SubprocessHandler, "_popen", old_popen)
    assert patches.install(params.WorkerStart(kill_orphans=False, new_session=True)) is None
    SubprocessHandler._popen(Handler(), ("python", "t.py"), {"A": "1"})  # type: ignore[arg-type]
    assert calls == [
        {
            "args": ("python", "t.py"),
            "env": {"A": "1"},
            "stdout": "out",
            "stderr": None,
            "start_new_session": True,
        }
    ]
    patches.restore_all()

    def other_popen(self: Any, args: Any, env: Any) -> Any:
        return subprocess.Popen(args, env=env, cwd="/")

    monkeypatch.setattr(SubprocessHandler, "_popen", other_popen)
    reason = patches.install(params.WorkerStart(kill_orphans=False, new_session=True))
    assert reason is not None and "expected subprocess, Popen, _stdout, _stderr" in reason


def test_the_agent_side_patches_leave_the_planned_job_watch_in_every_order() -> None:
    """Installed in any order, the agent-side patches leave one job watch with the settings the
    plan built (once, the peer timeout reached the store connection only when one patch came
    first)."""
    import itertools

    from torchrun_jsc.runtime import agent
    from torchrun_jsc.runtime.watch.vocabulary import Config

    config = Config(
        hostname="node1",
        node_rank=1,
        store_host="node0i",
        store_port=29500,
        run_id="9",
        peer_timeout=12.0,
        report=True,
    )
    specs = [
        # forward_signals starts a probe process at each install: left out (it does not
        # touch the job watch)
        params.WorkerStart(kill_orphans=False, new_session=False),
        params.StopSignal(),
        params.TermGrace(seconds=4.0),
        params.JobWatch(config=config),
        params.WaitForHost(endpoint="node0i:29500", wait=60.0),
        params.RankOrder(node_rank=1),
    ]
    seen = set()
    try:
        for order in itertools.permutations(specs):
            for spec in order:
                assert patches.install(spec) is None, spec
            watch = agent.runtime().session
            assert watch is not None
            protocol = watch._connect()
            assert protocol is not None
            seen.add((watch.config, protocol.store.timeout))  # type: ignore[attr-defined]
            patches.restore_all()
            assert agent.runtime().session is None  # restore_all dropped it
    finally:
        patches.restore_all()
    assert seen == {(config, 12.0)}


@pytest.mark.parametrize(
    ("losses", "longest"),
    [(1, 0.05), (2, 0.1), (3, 0.2), (6, 1.6), (7, 2.5), (10_000, 2.5)],
)
def test_backoff_window_doubles_per_loss_up_to_its_cap(losses: int, longest: float) -> None:
    from torchrun_jsc.patches.backoff import window

    assert window(losses, 0.05, 2.5) == pytest.approx(longest)


class _Rivalled:
    """A rendezvous backend (compare-and-set on one blob, in memory) whose first ``rivals``
    writes lose to another node's write that comes first."""

    name = "memory"

    def __init__(self, rivals: int) -> None:
        self.blob, self.token, self.rivals = b"", 0, rivals
        self.calls: list[str] = []

    def get_state(self) -> Any:
        self.calls.append("get")
        return (self.blob, self.token) if self.blob else None

    def set_state(self, state: bytes, token: Any = None) -> Any:
        self.calls.append("set")
        if self.rivals:
            self.rivals -= 1
            self.token += 1  # another node's write wins first
            return self.blob, self.token, False
        if token != self.token:
            return self.blob, self.token, False
        self.blob, self.token = state, self.token + 1
        return self.blob, self.token, True


def test_backoff_waits_after_each_lost_write_and_reads_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pickle

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    from torchrun_jsc.patches import backoff

    waits: list[float] = []
    monkeypatch.setattr(backoff.time, "sleep", waits.append)
    rival = _Rivalled(rivals=3)
    rival.blob = pickle.dumps(dr._RendezvousState())
    settings = dr.RendezvousSettings("r", 2, 2, dr.RendezvousTimeout(), dr.timedelta(seconds=5), 3)
    holder = dr._BackendRendezvousStateHolder(rival, settings)  # type: ignore[arg-type]
    assert patches.install(params.Backoff(first=0.05, cap=0.15)) is None
    assert holder.sync() is None and rival.calls == ["get"]  # a plain read never waits
    outcomes = []
    for _ in range(4):  # the join op writes again after each loss, from the state it holds
        holder.mark_dirty()
        outcomes.append(holder.sync())
    assert outcomes == [False, False, False, True]
    assert rival.calls == ["get", "set", "get", "set", "get", "set", "get", "set"]
    assert len(waits) == 3 and all(0 <= w <= top for w, top in zip(waits, (0.05, 0.1, 0.15)))
    holder.mark_dirty()
    rival.rivals = 1
    assert holder.sync() is False and 0 <= waits[-1] <= 0.05  # a won write starts it over
    patches.restore_all()
    holder.mark_dirty()
    rival.rivals, rival.calls = 1, []
    assert holder.sync() is False and rival.calls == ["set"] and len(waits) == 4  # torch's own
