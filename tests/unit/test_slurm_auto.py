"""Slurm auto-configuration, the options the user gave, and the launch guards."""

from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from torchrun_jsc.errors import ConfigError
from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.guards import ifname_selects
from torchrun_jsc.plan import Plan
from torchrun_jsc.torch_cli import CommandLine, Parsed

from .layouts import ib, node
from .planning import plan as planned
from .planning import request

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
    return planned(argv, env, "2.13.0", node(node_id, host, (ib(0),)))


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
    found = CommandLine(env).parse(argv)
    assert isinstance(found, Parsed)
    assert found.given - {"training_script", "training_script_args"} == given


def test_usage_error_is_torchruns_stop() -> None:
    found = CommandLine({}).parse(["--bogus", *SCRIPT])
    assert not isinstance(found, Parsed)
    assert found.code == 2 and "unrecognized arguments: --bogus" in found.text


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


def test_bad_slurm_variable_is_a_config_error_when_used() -> None:
    with pytest.raises(ConfigError, match="SLURM_STEP_NODELIST"):
        plan(SCRIPT, step_env(SLURM_STEP_NODELIST="node[3-1]", TORCHRUN_JSC_SLURM_AUTO="1"))
    with pytest.raises(ConfigError, match="SLURM_NODEID"):
        plan(MULTI, step_env(SLURM_NODEID="x"))


@pytest.mark.parametrize(
    "broken",
    [{"SLURM_JOB_NODELIST": "a,,b", "SLURM_STEP_NODELIST": "a,,b"}, {"SLURM_NODEID": "abc"}],
    ids=["nodelist", "nodeid"],
)
def test_unrelated_broken_slurm_variables_never_stop_an_untouched_launch(
    broken: Dict[str, str],
) -> None:
    p = plan(["--standalone", *SCRIPT], step_env(**broken))
    assert p.refusal is None and p.argv[-3:] == tuple(SCRIPT)
    assert any("Slurm launch checks skipped" in w for w in p.warnings)


def test_auto_without_a_nodelist_in_a_multi_node_step_is_an_error() -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1")
    del env["SLURM_STEP_NODELIST"], env["SLURM_JOB_NODELIST"]
    with pytest.raises(ConfigError, match="cannot choose --rdzv_endpoint: SLURM_STEP_NODELIST"):
        plan(SCRIPT, env)


@pytest.mark.parametrize("suffix", ["..", "x" * 60, "-" + "x" * 62])
def test_auto_endpoint_must_be_a_host_name(suffix: str) -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1", TORCHRUN_JSC_HOST_SUFFIX=suffix)
    with pytest.raises(ConfigError) as info:
        plan(SCRIPT, env)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- guards

MULTI = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_endpoint=node0i:29500", *SCRIPT]


def test_guard_several_tasks_per_node_stops() -> None:
    p = plan(MULTI, step_env(tasks="2(x4)"))
    assert p.refusal is not None and p.refusal.startswith(
        "2 Slurm tasks on this node would each start a torchrun agent; start one task per node"
        " (srun --ntasks-per-node=1)"
    )


def test_guard_several_tasks_per_node_warns_when_asked() -> None:
    p = plan(MULTI, step_env(tasks="2(x4)", TORCHRUN_JSC_GUARDS="warn"))
    assert any("2 Slurm tasks on this node" in w for w in p.warnings)


def test_guard_outside_srun_in_multi_node_allocation_stops() -> None:
    env = step_env()
    del env["SLURM_STEP_ID"], env["SLURM_STEP_NUM_NODES"], env["SLURM_STEP_NODELIST"]
    refusal = plan(MULTI, env).refusal
    assert refusal is not None and "started outside srun in a 4-node allocation" in refusal


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


@pytest.mark.parametrize(("text", "result"), [("4", (4, 4)), ("2:8", (2, 8))])
def test_nnodes_as_torch_reads_it(text: str, result: object) -> None:
    options = request([f"--nnodes={text}", *SCRIPT]).options
    assert options is not None and (options.min_nodes, options.max_nodes) == result


@pytest.mark.parametrize("text", ["x", "0", "3:2", "1:2:3", "-1"])
def test_nnodes_torch_would_reject_is_one_line(text: str) -> None:
    with pytest.raises(ConfigError, match=rf"^--nnodes='{text}' is not valid"):
        request([f"--nnodes={text}", *SCRIPT])


def test_lookup_host_is_the_auto_configured_endpoint() -> None:
    env = step_env(TORCHRUN_JSC_SLURM_AUTO="1", TORCHRUN_JSC_HOST_SUFFIX="i")
    assert request(SCRIPT, env).lookup_host == "node0i"
    assert request(SCRIPT, step_env()).lookup_host is None


# ----------------------------------------------------------------------------- CPUs and limits


def with_facts(i: int = 1, **kw: object) -> NodeFacts:
    return node(i, "node0i", (ib(0),))._replace(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cpus", "asked", "nproc", "warned"),
    [
        (1, "48", "4", "may use 1 CPU although SLURM_CPUS_PER_TASK=48"),
        (48, "48", "4", None),
        (2, None, "4", "4 workers will share 2 CPUs"),
        (4, None, "4", None),
        (1, None, "gpu", None),
        (None, "48", "4", None),
    ],
)
def test_cpu_affinity_guard(
    cpus: Optional[int], asked: Optional[str], nproc: str, warned: Optional[str]
) -> None:
    env = step_env() if asked is None else step_env(SLURM_CPUS_PER_TASK=asked)
    argv = [*MULTI[:-3], f"--nproc_per_node={nproc}", *SCRIPT]
    p = planned(argv, env, "2.13.0", with_facts(cpus=cpus))
    found = [w for w in p.warnings if "CPU" in w]
    if warned is None:
        assert found == []
    else:
        assert len(found) == 1 and warned in found[0], found
        assert "SRUN_CPUS_PER_TASK" in found[0]


def test_no_cpu_advice_outside_slurm() -> None:
    """Slurm advice only under Slurm: the same launch without a Slurm step warns of nothing."""
    argv = [*MULTI[:-3], "--nproc_per_node=4", *SCRIPT]
    p = planned(argv, {}, "2.13.0", with_facts(cpus=2))
    assert [w for w in p.warnings if "CPU" in w] == []
    assert [
        w for w in planned(argv, step_env(), "2.13.0", with_facts(cpus=2)).warnings if "CPU" in w
    ]


@pytest.mark.parametrize(
    ("node_id", "somaxconn", "files", "words"),
    [
        (
            0,
            2,
            None,
            "net.core.somaxconn=2 on this node, which serves the rendezvous store for up"
            " to 4 nodes",
        ),
        (1, 2, None, None),
        (0, 4096, None, None),
        (0, None, 40, "ulimit -n is 40 on this node"),
        (0, None, 100000, None),
    ],
)
def test_store_host_limits_guard(
    node_id: int, somaxconn: Optional[int], files: Optional[int], words: Optional[str]
) -> None:
    facts = with_facts(node_id, somaxconn=somaxconn, open_files=files)
    p = planned(MULTI, step_env(node_id=node_id), "2.13.0", facts)
    found = [w for w in p.warnings if "somaxconn" in w or "ulimit" in w]
    assert (found == []) if words is None else (len(found) == 1 and words in found[0]), found


def test_open_files_needed_counts_the_workers_store_on_node_rank_0_from_torch_2_6() -> None:
    argv = ["--nnodes=16", "--nproc_per_node=4", *MULTI[1:]]
    facts = with_facts(0, open_files=150)
    new = [w for w in planned(argv, step_env(0, 16, "1(x16)"), "2.13.0", facts).warnings]
    old = [w for w in planned(argv, step_env(0, 16, "1(x16)"), "2.4.1", facts).warnings]
    assert not any("ulimit" in w for w in old), "16 x 2 + 64 = 96 files: enough"
    assert any("needs about 160 open files" in w for w in new), "16 x (2 + 4) + 64"
