"""Carrying a plan out: environment, patches, and what is logged."""

from __future__ import annotations

import logging
from typing import Dict, Iterator, List

import pytest

from torchrun_jsc import patches
from torchrun_jsc.apply import carry_out
from torchrun_jsc.log import logger

from .layouts import node
from .planning import plan as make_plan

ARGV = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", "train.py"]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[Records]:
    log = logger
    handler, level = Records(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler
    log.removeHandler(handler)
    log.setLevel(level)
    patches.restore_all()


def test_sets_environment_and_logs_one_info_line(records: Records) -> None:
    environ: Dict[str, str] = {}
    plan = make_plan(ARGV, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert carry_out(plan, environ) == []
    assert environ == {"GLOO_SOCKET_IFNAME": "ib", "NCCL_SOCKET_IFNAME": "ib"}
    infos = [r.getMessage() for r in records.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and infos[0].startswith("torchrun_jsc: torch 2.13.0")
    assert "--local_addr=10.78.0.11" in infos[0]


def test_declined_patch_and_predicted_failure_are_warned(records: Records) -> None:
    plan = make_plan(
        ARGV,
        {
            "SLURM_NODEID": "1",
            "TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1",
            "GLOO_SOCKET_IFNAME": "mgmt",
        },
        "2.4.1",
        node(1),
    )
    warnings = carry_out(plan, {})
    assert warnings == [
        "patch store_info_build skipped: torch.distributed.elastic.rendezvous.api."
        "RendezvousStoreInfo.build has parameters (rank, store, local_addr, server_port); "
        "expected (rank, store)"
    ]
    texts = [r.getMessage() for r in records.records if r.levelno == logging.WARNING]
    assert any("patch store_info_build skipped" in t for t in texts)
    assert any("this launch will likely fail: GLOO_SOCKET_IFNAME=mgmt" in t for t in texts)


def test_a_plan_that_changes_nothing_logs_nothing(records: Records) -> None:
    env = {
        "TORCHRUN_JSC_KILL_ORPHANS": "0",
        "TORCHRUN_JSC_FORWARD_SIGNALS": "none",
        "TORCHRUN_JSC_FAILURE_REPORT": "0",
    }
    plan = make_plan(["--standalone", "train.py"], env, "2.13.0", node(0))
    assert not plan.changes_anything
    assert carry_out(plan, {}) == []
    assert records.records == []
