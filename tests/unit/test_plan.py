"""The pure plan as a whole: it is pure and its summary names every change.

The plan's tables (torch versions x settings x spellings x layouts) are in test_plan_*.py."""

from __future__ import annotations

from .layouts import ib, node
from .planning import plan


def test_plan_is_pure() -> None:
    env = {"SLURM_NODEID": "2"}
    first = plan(env=env, facts=node(2))
    assert plan(env=dict(env), facts=node(2)) == first
    assert env == {"SLURM_NODEID": "2"}


def test_summary_names_every_change() -> None:
    text = plan(env={"SLURM_NODEID": "0"}).summary()
    assert text.startswith("torchrun_jsc: torch 2.13.0 (>=2.6)")
    for part in ("is_host=1", f"--local_addr={ib(0)}", "GLOO_SOCKET_IFNAME=ib"):
        assert part in text
