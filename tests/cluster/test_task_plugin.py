"""The harness's Slurm task plugins: task/affinity binds each task to its step's CPUs (and
shows the SRUN_CPUS_PER_TASK pitfall of Slurm >= 22.05), task/none leaves tasks unbound."""

from __future__ import annotations

import pytest

from tests.cluster.harness import Cluster, free_prefix

pytestmark = pytest.mark.cluster


_AFFINITY = (
    "import os; print('cpus', os.environ['SLURM_CPUS_PER_TASK'], len(os.sched_getaffinity(0)))"
)


def _affinity_job(c: Cluster) -> dict[str, list[str]]:
    """An ``sbatch --cpus-per-task=2`` job on every node: what its batch shell, a plain srun
    and an srun with SRUN_CPUS_PER_TASK exported see (``cpus <SLURM_CPUS_PER_TASK> <n>``)."""
    show = f'{c.python} -c "{_AFFINITY}"'
    script = c.workdir / "affinity.sbatch"  # type: ignore[operator]
    script.write_text(
        "#!/bin/bash\n"
        f'echo "batch $({show})"\n'
        f"srun --label {show} | sed 's/^/plain /'\n"
        "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\n"
        f"srun --label {show} | sed 's/^/exported /'\n"
    )
    args = [f"-N{c.nodes}", "--ntasks-per-node=1", "--cpus-per-task=2"]
    jobid = c.sbatch(script, sbatch_args=args)
    state = c.wait_job(jobid, timeout=60)
    out = c.job_output_path(jobid).read_text()
    assert state == ("COMPLETED", 0), out
    seen: dict[str, list[str]] = {}
    for ln in out.splitlines():
        kind, _, rest = ln.partition(" ")
        seen.setdefault(kind, []).append(rest.split(": ")[-1])
    return seen


def test_task_affinity_binds_to_the_step_cpus() -> None:
    """The Slurm >= 22.05 pitfall: srun in an --cpus-per-task=2 job gives each task one CPU
    (SLURM_CPUS_PER_TASK still says 2) unless SRUN_CPUS_PER_TASK is exported."""
    with Cluster(nodes=2, prefix=free_prefix("trja"), task_plugin="affinity") as c:
        conf = c.slurm_conf.read_text()
        assert "TaskPlugin=task/affinity\nTaskPluginParam=Cores\n" in conf
        seen = _affinity_job(c)
    assert seen == {
        "batch": ["cpus 2 2"],
        "plain": ["cpus 2 1"] * 2,
        "exported": ["cpus 2 2"] * 2,
    }, seen


def test_task_none_leaves_tasks_unbound(cluster: Cluster) -> None:
    assert _affinity_job(cluster) == {
        "batch": ["cpus 2 2"],
        "plain": ["cpus 2 2"] * 4,
        "exported": ["cpus 2 2"] * 4,
    }
