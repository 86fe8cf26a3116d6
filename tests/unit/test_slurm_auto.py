"""Slurm auto-configuration, the options the user gave, and the launch guards."""

from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from torchrun_jsc import launch_args
from torchrun_jsc.errors import ConfigError
from torchrun_jsc.plan import Plan, ifname_selects, make_plan, nnodes_range

from .layouts import ib, node

SCRIPT = ["train.py", "--lr", "0.1"]


def step_env(
    node_id: int = 1, nodes: int = 4, tasks: str = "1(x4)", **extra: str
) -> Dict[str, str]:
    env = {
        "SLURM_JOB_ID": "123456",
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": str(node_id),
        "SLURM_PROCID": str(node_id),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_STEP_NODELIST": f"node[0-{nodes - 1}]",
        "SLURM_JOB_NODELIST": f"node[0-{nodes - 1}]",
        "SLURM_STEP_TASKS_PER_NODE": tasks,
    }
    env.update(extra)
    return env


def plan(
    argv: List[str], env: Dict[str, str], node_id: int = 1, endpoint: Optional[str] = None
) -> Plan:
    host = endpoint or "node0i"
    return make_plan(argv, env, "2.13.0", node(node_id, host, (ib(0),)))


# ----------------------------------------------------------------------------- given options


@pytest.mark.parametrize(
    ("argv", "env", "given"),
    [
        (SCRIPT, {}, set()),
        (["--nnodes", "2", *SCRIPT], {}, {"nnodes"}),
        (["--rdzv-backend=static", *SCRIPT], {}, {"rdzv_backend"}),
        (["--rdzv_e", "h:1", *SCRIPT], {}, {"rdzv_endpoint"}),
        (SCRIPT, {"PET_RDZV_ID": "x", "PET_NNODES": ""}, {"rdzv_id"}),
        (["--standalone", *SCRIPT], {}, {"standalone"}),
    ],
    ids=["none", "space", "dashes-default-value", "abbreviated", "pet", "flag"],
)
def test_given_options(argv: List[str], env: Dict[str, str], given: set[str]) -> None:
    found = launch_args.given_options(argv, env)
    assert found is not None
    assert found - {"training_script", "training_script_args"} == given


def test_given_options_none_on_usage_error() -> None:
    assert launch_args.given_options(["--bogus", *SCRIPT], {}) is None


# ----------------------------------------------------------------------------- auto-configuration


def test_auto_fills_everything_on_a_jsc_system() -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1", SYSTEMNAME="juwelsbooster", SLURM_GPUS_ON_NODE="4")
    p = plan(SCRIPT, env)
    port = 20000 + 123456 % 12000
    assert p.added_args[:5] == (
        "--nnodes=4",
        "--nproc_per_node=4",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=node0i:{port}",
        "--rdzv_id=slurm-123456-0",
    )
    assert p.added_args[5:] == ("--rdzv_conf=is_host=0", f"--local_addr={ib(1)}")
    assert p.argv[-3:] == tuple(SCRIPT)
    assert any("Slurm auto-configuration" in d.reason for d in p.decisions)


def test_auto_never_overrides_given_options() -> None:
    argv = ["--nnodes=2", "--rdzv_endpoint", "node0i:1234", "--rdzv_id=mine", *SCRIPT]
    env = step_env(
        TORCHRUN_JSC_SLURM_AUTO="1",
        TORCHRUN_JSC_HOST_SUFFIX="i",
        PET_NPROC_PER_NODE="2",
        SLURM_GPUS_ON_NODE="4",
    )
    p = plan(argv, env)
    assert p.added_args[0] == "--rdzv_backend=c10d"
    assert not any(
        a.startswith(("--nnodes", "--rdzv_endpoint", "--rdzv_id", "--nproc")) for a in p.added_args
    )


@pytest.mark.parametrize(
    ("suffix_env", "endpoint_host"),
    [
        ({}, "node0"),
        ({"TORCHRUN_JSC_HOST_SUFFIX": "i"}, "node0i"),
        ({"SYSTEMNAME": "jurecadc"}, "node0i"),
        ({"SYSTEMNAME": "jurecadc", "TORCHRUN_JSC_HOST_SUFFIX": "none"}, "node0"),
        ({"TORCHRUN_JSC_HOST_SUFFIX": "-ib.cluster"}, "node0-ib.cluster"),
    ],
    ids=["unknown-system", "configured", "jsc-default", "jsc-none", "dotted"],
)
def test_auto_endpoint_suffix(suffix_env: Dict[str, str], endpoint_host: str) -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1", **suffix_env)
    p = plan(SCRIPT, env, endpoint=endpoint_host)
    endpoint = next(a for a in p.added_args if a.startswith("--rdzv_endpoint="))
    assert endpoint.split("=", 1)[1].rsplit(":", 1)[0] == endpoint_host


def test_auto_keeps_a_static_backend() -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1")
    p = plan(["--rdzv_backend=static", "--master_addr=node0i", *SCRIPT], env)
    assert p.added_args == ("--nnodes=4",)


def test_auto_outside_a_step_warns_and_fills_nothing() -> None:
    p = plan(["--nnodes=1", *SCRIPT], {"TORCHRUN_JSC_SLURM_AUTO": "1"})
    assert p.added_args == ()
    assert any("outside a Slurm step" in w for w in p.warnings)


def test_auto_off_by_default() -> None:
    p = plan(SCRIPT, step_env())
    assert p.added_args == ()


@pytest.mark.parametrize("value", ["a b", "i/", "ä"])
def test_bad_suffix(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^TORCHRUN_JSC_HOST_SUFFIX="):
        plan(SCRIPT, {"TORCHRUN_JSC_HOST_SUFFIX": value})


def test_bad_slurm_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="SLURM_STEP_NODELIST"):
        plan(SCRIPT, step_env(SLURM_STEP_NODELIST="node[3-1]"))


# ----------------------------------------------------------------------------- guards

MULTI = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_endpoint=node0i:29500", *SCRIPT]


def test_guard_several_tasks_per_node_stops() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^2 Slurm tasks on this node would each start a "
        r"torchrun agent; start one task per node \(srun --ntasks-per-node=1\)",
    ):
        plan(MULTI, step_env(tasks="2(x4)"))


def test_guard_several_tasks_per_node_warns_when_asked() -> None:
    p = plan(MULTI, step_env(tasks="2(x4)", TORCHRUN_JSC_GUARDS="warn"))
    assert any("2 Slurm tasks on this node" in w for w in p.warnings)


def test_guard_outside_srun_in_multi_node_allocation_stops() -> None:
    env = step_env()
    del env["SLURM_STEP_ID"], env["SLURM_STEP_NUM_NODES"], env["SLURM_STEP_NODELIST"]
    with pytest.raises(ConfigError, match="started outside srun in a 4-node allocation"):
        plan(MULTI, env)


@pytest.mark.parametrize(
    "argv", [["--standalone", *SCRIPT], ["--nnodes=1", *SCRIPT]], ids=["standalone", "nnodes-1"]
)
def test_guard_single_node_config_in_multi_node_step_warns(argv: List[str]) -> None:
    p = plan(argv, step_env())
    assert any("4 independent jobs will run" in w for w in p.warnings)


def test_no_guard_fires_on_a_good_launch() -> None:
    p = plan(MULTI, step_env())
    assert p.warnings == () and p.predicted_failures == ()


@pytest.mark.parametrize(
    ("variable", "value", "selects"),
    [
        ("GLOO_SOCKET_IFNAME", "ib", True),
        ("GLOO_SOCKET_IFNAME", "mgmt", False),
        ("GLOO_SOCKET_IFNAME", "mgmt,ib", True),
        ("GLOO_SOCKET_IFNAME", "i", False),
        ("NCCL_SOCKET_IFNAME", "i", True),
        ("NCCL_SOCKET_IFNAME", "=i", False),
        ("NCCL_SOCKET_IFNAME", "^mg", True),
        ("NCCL_SOCKET_IFNAME", "^ib", False),
        ("NCCL_SOCKET_IFNAME", "eth,ib", True),
        ("NCCL_SOCKET_IFNAME", "^=ib", False),
    ],
)
def test_ifname_selects(variable: str, value: str, selects: bool) -> None:
    assert ifname_selects(variable, value, "ib") is selects


def test_guard_user_gloo_ifname_on_wrong_network() -> None:
    p = plan(MULTI, step_env(GLOO_SOCKET_IFNAME="mgmt", NCCL_SOCKET_IFNAME="mg"))
    assert any(
        f.startswith("GLOO_SOCKET_IFNAME=mgmt does not select ib") for f in p.predicted_failures
    )
    assert any(w.startswith("NCCL_SOCKET_IFNAME=mg does not select ib") for w in p.warnings)
    assert "GLOO_SOCKET_IFNAME" not in dict(p.env)


@pytest.mark.parametrize(("text", "result"), [("4", (4, 4)), ("2:8", (2, 8)), ("x", None)])
def test_nnodes_range(text: str, result: object) -> None:
    assert nnodes_range(text) == result


def test_endpoint_host_sees_the_auto_configured_endpoint() -> None:
    from torchrun_jsc.plan import endpoint_host

    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1", TORCHRUN_JSC_HOST_SUFFIX="i")
    assert endpoint_host(SCRIPT, env) == "node0i"
    assert endpoint_host(SCRIPT, step_env()) is None
