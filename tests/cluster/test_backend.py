"""The rendezvous backend ``jsc`` through launchers nobody here wrote: torch's own ``torchrun``,
Hugging Face accelerate's ``accelerate launch`` and Lightning Fabric's ``fabric run``, on 4
namespace nodes with the endpoint on the IB network. With ``c10d`` they fail as plain torch does;
with ``jsc`` they train."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List, Sequence

import pytest

from tests.cluster.conftest import torch_version
from tests.cluster.harness import Cluster, Result
from tests.cluster.recovery_jobs import (
    RESUME,
    assert_resumed_and_completed,
    every_node_exited,
    said,
    spare_replaces_a_frozen_node,
    with_a_spare,
)
from tests.cluster.scenarios import (
    TRAIN,
    TRAIN_FABRIC,
    Job,
    all_text,
    assert_failed,
    assert_training_ok,
    describe,
    on_each_node,
    parse_results,
)
from torchrun_jsc.backend_name import FIRST

pytestmark = pytest.mark.cluster

OK_CONF = "join_timeout=60,read_timeout=60"
#: The plain-torch control runs fail within seconds with these (torch's parser reads them from
#: the environment for accelerate too, which has no option for them).
FAIL_CONF = "join_timeout=8,read_timeout=8"


def needs_entry_points(cluster: Cluster) -> None:
    version = torch_version(cluster.python)
    if version is None or version.key < FIRST:
        pytest.skip(
            f"torch {version} loads no rendezvous backends from entry points (torch >="
            f" {FIRST[0]}.{FIRST[1]} does)"
        )


def needs(cluster: Cluster, module: str) -> None:
    """Skip unless ``module`` (a launcher from PyPI) imports under the cluster's Python."""
    found = subprocess.run(
        [str(cluster.python), "-c", f"import {module}"], capture_output=True, timeout=120
    )
    if found.returncode != 0:
        pytest.skip(f"{module} is not installed for {cluster.python} (the test extra has it)")


def plain_torch_failed(plain: Result) -> None:
    """The plain-torch control: no rank trained, and nodes failed to reach the store nobody
    serves. (Nodes may instead still be in torch's connect retry at the step's bound: a minute
    and more per try on torch 2.8 and later, longer on a loaded machine; at least one has
    named the failure by then.)"""
    assert not parse_results(all_text(plain)), describe(plain)
    assert_failed(plain, "RendezvousConnectionError", min_count=1)


def torchrun(cluster: Cluster, backend: str, conf: str) -> List[str]:
    return [
        str(cluster.python),
        "-m",
        "torch.distributed.run",
        "--nnodes=4",
        "--nproc-per-node=1",
        f"--rdzv-backend={backend}",
        "--rdzv-id=5",
        "--rdzv-endpoint=node0i:29500",
        f"--rdzv-conf={conf}",
        str(TRAIN),
    ]


def accelerate_options(
    backend: str, machines: int = 4, extra: Sequence[str] = (), script: Path = TRAIN
) -> List[str]:
    """``accelerate launch``'s options for ``machines`` CPU machines, one process each, but the
    machine rank, then ``script``."""
    return [
        "--multi_gpu",
        f"--num_machines={machines}",
        f"--num_processes={machines}",
        "--main_process_ip=node0i",
        "--main_process_port=29500",
        f"--rdzv_backend={backend}",
        *extra,
        "--mixed_precision=no",
        "--dynamo_backend=no",
        str(script),
    ]


def accelerate(cluster: Cluster, backend: str) -> List[str]:
    """``accelerate launch`` as its Slurm example runs it, one task per node."""
    launch = [str(cluster.python), "-m", "accelerate.commands.launch", "--machine_rank=@NODEID@"]
    return on_each_node([*launch, *accelerate_options(backend)])


def fabric(cluster: Cluster) -> List[str]:
    """Lightning Fabric's ``fabric run`` as its multi-node guide runs it, one task per node (the
    module's own entry runs the ``run`` command)."""
    return on_each_node(
        [
            str(cluster.python),
            "-m",
            "lightning.fabric.cli",
            "--accelerator=cpu",
            "--devices=1",
            "--num-nodes=4",
            "--node-rank=@NODEID@",
            "--main-address=node0i",
            "--main-port=29500",
            str(TRAIN_FABRIC),
        ]
    )


def test_torchrun_with_the_jsc_backend_trains(jsc_cluster: Cluster) -> None:
    needs_entry_points(jsc_cluster)
    r = jsc_cluster.srun(torchrun(jsc_cluster, "jsc", OK_CONF), timeout=150)
    assert_training_ok(jsc_cluster, r, world=4)
    # the job watch ran in torch's own agent: the host's summary line
    assert "torchrun_jsc: summary: job" in r.stdout + r.stderr, describe(r)
    assert "is ignored by torch" not in r.stdout + r.stderr, "torch's own settings read back"


@pytest.mark.slow(
    reason="accelerate from PyPI, two launches: the matrix runs it (scripts/torch-matrix)"
)
def test_accelerate_launch_fails_with_c10d_and_trains_with_jsc(jsc_cluster: Cluster) -> None:
    needs_entry_points(jsc_cluster)
    needs(jsc_cluster, "accelerate")
    env = {"HF_HUB_OFFLINE": "1", "PET_RDZV_CONF": FAIL_CONF}
    plain = jsc_cluster.srun(accelerate(jsc_cluster, "c10d"), env=env, timeout=150)
    plain_torch_failed(plain)
    env["PET_RDZV_CONF"] = OK_CONF
    fixed = jsc_cluster.srun(accelerate(jsc_cluster, "jsc"), env=env, timeout=150)
    results = assert_training_ok(jsc_cluster, fixed, world=4)
    # accelerate's --machine_rank is torch's --node_rank, which torch ignores for c10d; the
    # backend orders the group ranks by it (torchrun_jsc's rank order)
    assert {r.host: r.group_rank for r in results} == {f"node{i}": str(i) for i in range(4)}


@pytest.mark.slow(reason="a control of plain torch: the matrix runs it (scripts/torch-matrix)")
def test_plain_torchrun_with_c10d_is_left_alone(jsc_cluster: Cluster, tmp_path: Path) -> None:
    """Installed, the backend changes nothing for launches that do not name it."""
    needs_entry_points(jsc_cluster)
    r = jsc_cluster.srun(torchrun(jsc_cluster, "c10d", FAIL_CONF), timeout=120)
    assert not r.timed_out, describe(r)
    assert_failed(r, "RendezvousConnectionError", min_count=4)
    # no line of torchrun_jsc's (its paths may name it: the matrix's venvs)
    assert "torchrun_jsc: " not in r.stdout + r.stderr, describe(r)


@pytest.mark.slow(
    reason="Lightning from PyPI, two launches: the matrix runs it (scripts/torch-matrix)"
)
def test_fabric_run_fails_with_c10d_and_trains_with_jsc(jsc_cluster: Cluster) -> None:
    """``fabric run`` has no rendezvous options of its own (it launches torch's static
    rendezvous); torch's parser reads the backend, endpoint and settings from ``PET_*``."""
    needs_entry_points(jsc_cluster)
    needs(jsc_cluster, "lightning.fabric")
    env = {
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "node0i:29500",
        "PET_RDZV_ID": "5",
        "PET_RDZV_CONF": FAIL_CONF,
        "OMP_NUM_THREADS": "1",
    }
    plain = jsc_cluster.srun(fabric(jsc_cluster), env=env, timeout=150)
    plain_torch_failed(plain)
    env.update(PET_RDZV_BACKEND="jsc", PET_RDZV_CONF=OK_CONF)
    fixed = jsc_cluster.srun(fabric(jsc_cluster), env=env, timeout=150)
    results = assert_training_ok(jsc_cluster, fixed, world=4)
    # Fabric's --node-rank reaches torch's --node_rank: the group ranks in node order
    assert {r.host: r.group_rank for r in results} == {f"node{i}": str(i) for i in range(4)}


@pytest.mark.slow(reason="accelerate from PyPI, a recovery of about 90 s: the matrix runs it")
def test_a_spare_takes_a_frozen_nodes_place_through_accelerate_launch(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """``accelerate launch --rdzv_backend=jsc`` on 5 nodes for 4 machines: the fifth waits as a
    spare. A training node (not the rendezvous host) frozen → every live node says restart 1,
    the spare takes its place, training resumes from the checkpoint and completes on 4 nodes;
    every live node exits 0, and the frozen node, thawed, ends on its own."""
    cluster = five_cluster
    needs_entry_points(cluster)
    needs(cluster, "accelerate")
    job, spare, first = with_a_spare(
        cluster,
        job_cleanup,
        "accelerate",
        argv=accelerate_on_its_node(cluster, 4, 3),
        env={"HF_HUB_OFFLINE": "1", "PET_RDZV_CONF": "join_timeout=120,read_timeout=60"},
    )
    job.wait_for("TRJSC_TRAINING", nodes=first)
    frozen = spare_replaces_a_frozen_node(cluster, job, spare, first, "accelerate")
    live = [i for i in range(5) if i != frozen]
    job.wait_exit(live, 240)
    every_node_exited(job, live, 0)
    assert_resumed_and_completed(job, live, 4)
    job.wait_exit([frozen], 60)
    assert job.procs[frozen].returncode not in (None, 0), said(job)


def accelerate_on_its_node(cluster: Cluster, machines: int, restarts: int) -> List[str]:
    """``accelerate launch --rdzv_backend=jsc`` of jobs/resume.py, its machine rank the node's
    (``TORCHRUN_JSC_NODE_RANK``, set per node by the scenario)."""
    return [
        "bash",
        "-c",
        'exec "$0" -m accelerate.commands.launch --machine_rank="$TORCHRUN_JSC_NODE_RANK" "$@"',
        str(cluster.python),
        *accelerate_options("jsc", machines, (f"--max_restarts={restarts}",), RESUME),
    ]
