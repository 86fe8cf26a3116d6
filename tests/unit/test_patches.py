"""The runtime patches, installed into the real (installed) torch and undone after each test."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import _common

rdzv_utils = pytest.importorskip("torch.distributed.elastic.rendezvous.utils")


@pytest.fixture(autouse=True)
def undo() -> Iterator[None]:
    yield
    patches.restore_all()


def test_host_matcher_patches_both_bindings() -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    original = rdzv_utils._matches_machine_hostname
    assert original("node0i-not-here") is False
    assert patches.install("host_matcher", {"host": "node0i-not-here", "is_local": True}) is None
    assert rdzv_utils._matches_machine_hostname("node0i-not-here") is True
    assert backend._matches_machine_hostname("node0i-not-here") is True
    assert backend._matches_machine_hostname("localhost") is True, "others: torch decides"
    patches.restore_all()
    assert rdzv_utils._matches_machine_hostname is original
    assert backend._matches_machine_hostname is original


def test_host_matcher_can_say_no_for_the_endpoint() -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

    assert patches.install("host_matcher", {"host": "localhost", "is_local": False}) is None
    assert backend._matches_machine_hostname("localhost") is False


def test_node_desc_defaults_local_addr() -> None:
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDescGenerator

    assert patches.install("node_desc", {"address": "10.78.0.12"}) is None
    gen = _NodeDescGenerator()
    assert gen.generate().addr == "10.78.0.12"
    assert gen.generate("given").addr == "given", "an explicit local_addr still wins"


def test_fq_hostname_returns_the_address() -> None:
    from torch.distributed.elastic.agent.server import api

    assert patches.install("fq_hostname", {"address": "fd00:78::c"}) is None
    assert api._get_fq_hostname() == "fd00:78::c"


def test_store_info_build_declines_on_a_torch_with_another_signature() -> None:
    reason = patches.install("store_info_build", {"address": "10.0.0.1"})
    assert reason is not None
    assert reason.startswith("torch.distributed.elastic.rendezvous.api.RendezvousStoreInfo.build")
    assert "expected (rank, store)" in reason


def test_store_info_build_publishes_the_address_on_a_2_4_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    def build_2_4(rank: int, store: object) -> None:  # the 2.4 signature (a fingerprint)
        raise AssertionError("replaced")

    monkeypatch.setattr(RendezvousStoreInfo, "build", staticmethod(build_2_4))
    assert patches.install("store_info_build", {"address": "10.78.0.13"}) is None
    store = dist.HashStore()
    rank0 = RendezvousStoreInfo.build(0, store)
    rank1 = RendezvousStoreInfo.build(1, store)
    assert rank0.master_addr == rank1.master_addr == "10.78.0.13"
    assert rank0.master_port == rank1.master_port
    assert 0 < rank0.master_port < 65536


def test_std_from_str_declines_where_it_works() -> None:
    assert patches.install("std_from_str", {}) == "Std.from_str already works on this Python"


def test_std_from_str_repairs_a_broken_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.api import Std

    def broken(cls: object, vm: str) -> None:  # what torch < 2.0 does on Python >= 3.11
        return None

    monkeypatch.setattr(Std, "from_str", classmethod(broken))
    assert patches.install("std_from_str", {}) is None
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
    reason = patches.install("keep_rendezvous", {})
    assert reason is not None and reason.endswith(
        "LocalElasticAgent._stop_workers has parameters (self, worker_group, is_restart); "
        "expected (self, worker_group)"
    )
    monkeypatch.setattr(LocalElasticAgent, "_stop_workers", lambda self, worker_group: None)
    monkeypatch.setattr(LocalElasticAgent, "_shutdown", shutdown_2_13)
    reason = patches.install("keep_rendezvous", {})
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
        assert patches.install("keep_rendezvous", {}) is None
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
    reason = patches.install("fq_hostname", {"address": "a"})
    assert reason == (
        "torch.distributed.elastic.agent.server.api._get_fq_hostname has parameters (verbose);"
        " expected ()"
    )
    assert api._get_fq_hostname is changed


def test_a_missing_internal_is_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server import api

    monkeypatch.delattr(api, "_get_fq_hostname")
    reason = patches.install("fq_hostname", {"address": "a"})
    assert (
        reason == "torch.distributed.elastic.agent.server.api._get_fq_hostname does not exist"
        " in this torch"
    )


def test_unknown_patch_name() -> None:
    assert patches.install("nope", {}) == "unknown patch 'nope'"


def test_every_patch_module_declares_its_checks() -> None:
    for name in patches.NAMES:
        checks = patches.checks_of(name)
        assert checks, name
        assert all(c.module.startswith("torch.") and c.target and c.accepted for c in checks), name
    assert _common.parameters(staticmethod(lambda rank, store: None)) == ("rank", "store")
