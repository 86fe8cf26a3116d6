"""Explain, Slurm auto-configuration and the guards, on the namespace cluster."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from tests.cluster.harness import Cluster, ib_ip, split_labeled
from tests.cluster.scenarios import TRAIN, assert_training_ok, describe, parse_results

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
