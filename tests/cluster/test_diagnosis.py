"""Explain, Slurm auto-configuration and the guards, on the namespace cluster."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List

import pytest

from tests.cluster.harness import Cluster, ib_ip, split_labeled
from tests.cluster.scenarios import FIRST_ONLY, TRAIN, assert_training_ok, describe, parse_results

pytestmark = pytest.mark.cluster

MULTI = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_id=9", "--nproc_per_node=1"]


def jsc(cluster: Cluster, *args: str) -> List[str]:
    return [str(cluster.python), "-m", "torchrun_jsc", *args, str(TRAIN)]


def explained(text: str) -> Dict[int, Dict[str, Any]]:
    """``{task id: explain JSON}`` from labelled srun output."""
    found = {}
    for task, out in split_labeled(text).items():
        lines = out.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith("{"))
        end = max(i for i, ln in enumerate(lines) if ln.startswith("}"))
        found[task] = json.loads("\n".join(lines[start : end + 1]))
    return found


@pytest.mark.parametrize(
    "suffix_env",
    [{"TORCHRUN_JSC_HOST_SUFFIX": "i"}, {"SYSTEMNAME": "jurecadc"}],
    ids=["suffix-variable", "jsc-system-default"],
)
@FIRST_ONLY
def test_slurm_auto_configuration(jsc_cluster: Cluster, suffix_env: Dict[str, str]) -> None:
    """Nothing but `srun torchrun_jsc train.py` and the opt-in."""
    env = {"TORCHRUN_JSC_SLURM_AUTO": "1", **suffix_env}
    r = jsc_cluster.srun(jsc(jsc_cluster), env=env, timeout=150)
    assert_training_ok(jsc_cluster, r, world=4, master_addr=ib_ip(0))


def test_explain_good_configuration(main_cluster: Cluster) -> None:
    argv = jsc(main_cluster, *MULTI, "--rdzv_endpoint=node0i:29500")
    r = main_cluster.srun(argv, env={"TORCHRUN_JSC_EXPLAIN": "json"}, timeout=90)
    assert r.returncode == 0, describe(r)
    assert not parse_results(r.output), "explain launches nothing"
    plans = explained(r.stdout)
    assert sorted(plans) == [0, 1, 2, 3], describe(r)
    for task, data in plans.items():
        assert data["node"]["hostname"] == f"node{task}"
        assert data["is_host"] is (task == 0)
        assert data["advertised_address"] == ib_ip(task)
        assert data["interface"] == "ib"
        assert data["verdict"] == "ok" and data["predicted_failures"] == []
        assert f"--local_addr={ib_ip(task)}" in data["argv"]


def test_explain_names_the_broken_nodes(main_cluster: Cluster) -> None:
    """Endpoint on node2 but host node rank left at 0: node0 and node2 are wrong."""
    argv = jsc(main_cluster, *MULTI, "--rdzv_endpoint=node2i:29500")
    r = main_cluster.srun(argv, env={"TORCHRUN_JSC_EXPLAIN": "text"}, timeout=90)
    assert r.returncode != 0, describe(r)
    per_task = split_labeled(r.stdout)
    assert "verdict: fail" in per_task[0] and "explain on node0" in per_task[0]
    assert "WILL FAIL: this node would host the rendezvous store" in per_task[0]
    assert "verdict: fail" in per_task[2] and "TORCHRUN_JSC_HOST_NODE_RANK=2" in per_task[2]
    assert "verdict: ok" in per_task[1] and "verdict: ok" in per_task[3], describe(r)


def test_explain_wrong_gloo_interface(main_cluster: Cluster) -> None:
    argv = jsc(main_cluster, *MULTI, "--rdzv_endpoint=node0i:29500")
    env = {"TORCHRUN_JSC_EXPLAIN": "text", "GLOO_SOCKET_IFNAME": "mgmt"}
    r = main_cluster.srun(argv, env=env, timeout=90)
    assert r.returncode != 0, describe(r)
    for out in split_labeled(r.stdout).values():
        assert "WILL FAIL: GLOO_SOCKET_IFNAME=mgmt does not select ib" in out


def test_guard_two_tasks_per_node(main_cluster: Cluster) -> None:
    argv = jsc(main_cluster, *MULTI, "--rdzv_endpoint=node0i:29500")
    r = main_cluster.srun(argv, nodes=2, srun_args=["--ntasks-per-node=2"], timeout=90)
    assert r.returncode == 2, describe(r)
    tasks = split_labeled(r.output)
    assert sorted(tasks) == [0, 1, 2, 3]
    for out in tasks.values():
        assert (
            "torchrun_jsc: error: 2 Slurm tasks on this node would each start a torchrun "
            "agent; start one task per node (srun --ntasks-per-node=1)" in out
        )
    assert not parse_results(r.output)


def test_guard_started_outside_srun(main_cluster: Cluster) -> None:
    script = main_cluster.workdir / "no-srun.sbatch"  # type: ignore[operator]
    argv = " ".join(jsc(main_cluster, *MULTI, "--rdzv_endpoint=node0i:29500"))
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n{argv}\n")
    jobid = main_cluster.sbatch(script)
    state, code = main_cluster.wait_job(jobid, timeout=90)
    out = main_cluster.job_output_path(jobid).read_text()
    assert (state, code) == ("FAILED", 2), out
    assert "torchrun_jsc: error: started outside srun in a 4-node allocation" in out


def test_guard_single_node_config_in_multi_node_step(main_cluster: Cluster) -> None:
    argv = jsc(main_cluster, "--standalone", "--nproc_per_node=1")
    r = main_cluster.srun(argv, timeout=150)
    assert r.returncode == 0, describe(r)
    assert r.output.count("4 independent jobs will run") == 4, describe(r)
    results = parse_results(r.output)
    assert len(results) == 4 and all(x.world == 1 and x.ok for x in results), describe(r)


def test_guard_localhost_rendezvous_in_multi_node_step(main_cluster: Cluster) -> None:
    """Each node would wait alone on its own loopback until join_timeout: refused at once."""
    argv = jsc(main_cluster, "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400")
    r = main_cluster.srun(argv, nodes=2, timeout=90)
    assert r.returncode == 2, describe(r)
    tasks = split_labeled(r.output)
    assert sorted(tasks) == [0, 1], describe(r)
    for out in tasks.values():
        assert (
            "torchrun_jsc: error: --nnodes=2 with --rdzv_endpoint=localhost:29400 in a 2-node"
            " Slurm step: the agents of the other nodes cannot reach this machine's loopback" in out
        ), out
    assert not parse_results(r.output)


# --------------------------------------------------------------------------- CPUs and limits


@pytest.fixture(scope="session")
def binding_cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    """Two nodes whose tasks Slurm binds to their CPUs (task/affinity)."""
    return make_cluster(nodes=2, prefix="trja", task_plugin="affinity")


@pytest.mark.parametrize("inherit", [False, True], ids=["srun-forgets", "SRUN_CPUS_PER_TASK"])
def test_cpu_affinity_guard(binding_cluster: Cluster, inherit: bool) -> None:
    """sbatch --cpus-per-task=2, then srun: on Slurm 22.05 the task gets one CPU unless
    SRUN_CPUS_PER_TASK passes the value on. Explain shows the warning, and only then."""
    script = binding_cluster.workdir / f"cpus-{inherit}.sbatch"  # type: ignore[operator]
    argv = " ".join(jsc(binding_cluster, "--nnodes=2", *MULTI[1:], "--rdzv_endpoint=node0i:29500"))
    export = 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"\n' if inherit else ""
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2\n"
        f"export TORCHRUN_JSC_EXPLAIN=text\n{export}srun --label {argv}\n"
    )
    jobid = binding_cluster.sbatch(script)
    state, code = binding_cluster.wait_job(jobid, timeout=120)
    out = binding_cluster.job_output_path(jobid).read_text()
    assert (state, code) == ("COMPLETED", 0), out
    warned = out.count("may use 1 CPU although SLURM_CPUS_PER_TASK=2")
    assert warned == (0 if inherit else 2), out


def test_store_host_limits_guard(main_cluster: Cluster) -> None:
    """node0 serves the store for 32 nodes with a backlog of 8 and 100 open files."""
    before = main_cluster.node_sysctl(0, "net.core.somaxconn")
    main_cluster.node_sysctl(0, "net.core.somaxconn", "8")
    try:
        argv = jsc(main_cluster, "--nnodes=32", *MULTI[1:], "--rdzv_endpoint=node0i:29500")
        limited = ["bash", "-c", 'ulimit -n 100 && exec "$@"', "x", *argv]
        env = {"TORCHRUN_JSC_EXPLAIN": "text", "TORCHRUN_JSC_NODE_RANK": "0"}
        host, other = main_cluster.run_on_nodes(
            [limited, argv], [env, {**env, "TORCHRUN_JSC_NODE_RANK": "1"}], timeout=90
        )
    finally:
        main_cluster.node_sysctl(0, "net.core.somaxconn", before)
    assert (
        "warning: net.core.somaxconn=8 on this node, which serves the rendezvous store for up to"
        " 32 nodes" in host.stdout
    ), host.output
    assert "warning: ulimit -n is 100 on this node" in host.stdout, host.output
    assert "somaxconn" not in other.stdout and "ulimit" not in other.stdout, other.output
