"""The pure plan reads every spelling of torchrun's options and keeps what the user gives."""

from __future__ import annotations

import pytest

from .layouts import ib, node
from .planning import SCRIPT, patch_names, plan, start_patches

# ----------------------------------------------------------------------------- spellings


SPELLINGS = {
    "equals": [
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i:29500",
        "--rdzv_conf=join_timeout=5",
        *SCRIPT,
    ],
    "space": [
        "--nnodes",
        "2",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "node0i:29500",
        "--rdzv_conf",
        "join_timeout=5",
        *SCRIPT,
    ],
    "dashes": [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint=node0i:29500",
        "--rdzv-conf",
        "join_timeout=5",
        *SCRIPT,
    ],
    "abbreviated": [
        "--nn=2",
        "--rdzv_b",
        "c10d",
        "--rdzv_e=node0i:29500",
        "--rdzv_c=join_timeout=5",
        *SCRIPT,
    ],
    "module": [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i:29500",
        "--rdzv_conf=join_timeout=5",
        "-m",
        "pkg.train",
        "--lr",
        "0.1",
    ],
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_is_understood(spelling: str) -> None:
    argv = SPELLINGS[spelling]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert p.added_args == ("--rdzv_conf=join_timeout=5,is_host=1", f"--local_addr={ib(0)}")
    # the user's arguments stay, in order; ours come right before the script
    n = len(p.added_args)
    script_at = len(argv) - 3
    assert list(p.argv[:script_at]) == argv[:script_at]
    assert list(p.argv[script_at : script_at + n]) == list(p.added_args)
    assert list(p.argv[script_at + n :]) == argv[script_at:]


def test_pet_variables_are_read_like_torchrun() -> None:
    env = {
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "node0i:29500",
        "PET_RDZV_CONF": "read_timeout=9",
        "SLURM_NODEID": "3",
    }
    p = plan(["--nnodes=4", *SCRIPT], env=env, facts=node(3))
    assert "--rdzv_conf=read_timeout=9,is_host=0" in p.added_args
    assert f"--local_addr={ib(3)}" in p.added_args


def test_is_host_from_pet_rdzv_conf_is_kept() -> None:
    env = {"PET_RDZV_CONF": "is_host=yes,join_timeout=3", "SLURM_NODEID": "2"}
    p = plan(env=env, facts=node(2))
    assert p.is_host is True
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    assert p.predicted_failures, "host but the endpoint is not this node's: predicted failure"


def test_user_rdzv_conf_keys_kept_and_last_one_wins() -> None:
    argv = [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i",
        "--rdzv_conf=a=1",
        "--rdzv_conf",
        "b=2,b=3",
        *SCRIPT,
    ]
    p = plan(argv, env={"SLURM_NODEID": "1"}, facts=node(1))
    assert p.added_args[0] == "--rdzv_conf=b=3,is_host=0"


@pytest.mark.parametrize("given", ["is_host=0", "is_host=TRUE", "is_host=n"])
def test_user_is_host_is_never_overridden(given: str) -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", f"--rdzv_conf={given}", *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    assert p.is_host is (given.split("=")[1].lower() in ("true", "1", "y"))


@pytest.mark.parametrize("flag", ["--local_addr=node0x", "--local-addr", "--local_a"])
def test_user_local_addr_is_never_overridden(flag: str) -> None:
    parts = [flag, "node0x"] if "=" not in flag else [flag]
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", *parts, *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert not any(a.startswith("--local_addr") for a in p.added_args)
    assert "node_desc" not in patch_names(p)


def test_user_local_addr_on_torch_2_4_is_honoured_by_patch() -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", "--local_addr=node1i", *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "1"}, version="2.4.1", facts=node(1))
    assert start_patches(p) == [("store_info_build", {"address": "node1i"})]
