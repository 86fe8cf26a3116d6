"""Requeue from the checkpoint (``TORCHRUN_JSC_REQUEUE=1``), on the namespace cluster: batch
jobs submitted with ``--requeue`` whose script (``jobs/resume.py``) saves a checkpoint on
SIGUSR1 and every 5 steps, and resumes from it.

Slurm holds a requeued job back for the lifetime of a job credential before it may start again
(120 s by default; the namespace cluster sets ``AuthInfo=cred_expire=10``). Each run's tasks
write their output to a file of their own (``<name>-<run>-<task>.out``, the run being
``SLURM_RESTART_COUNT``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.recovery_jobs import PEER_TIMEOUT, RESUME, Run, last_run
from tests.cluster.scenarios import FIRST_ONLY, IN_THE_MATRIX, torchrun_argv
from tests.cluster.system import cmdline
from torchrun_jsc.runtime.events import entry

pytestmark = pytest.mark.cluster

STEPS = 60


def batch_script(
    cluster: Cluster,
    name: str,
    nodes: int,
    env: Dict[str, str],
    sbatch: Sequence[str] = ("--requeue",),
    max_restarts: int = 0,
    script: Path = RESUME,
    later: str = "",
    nnodes: str = "",
) -> Path:
    """A batch job of ``nodes`` nodes that runs torchrun_jsc on each (endpoint: the first node of
    the run's allocation), its tasks' output in ``<name>-<run>-<task>.out``; ``later``: shell
    words exported in the runs after the first; ``nnodes``: torchrun's ``--nnodes`` (default:
    ``nodes``)."""
    wd = cluster.workdir
    assert wd is not None
    ckpt = wd / f"{name}.ckpt"
    ckpt.unlink(missing_ok=True)
    for old in wd.glob(f"{name}-*.out"):
        old.unlink()
    command = " ".join(
        torchrun_argv(
            cluster.python,
            nnodes or str(nodes),
            "${first}i:29500",
            "join_timeout=90,read_timeout=60",
            (f"--max_restarts={max_restarts}",),
            script=script,
            module="torchrun_jsc",
        )
    )
    exports = " ".join(
        f"{k}={v}"
        for k, v in {
            "TRJSC_CKPT": str(ckpt),
            "TRJSC_STEPS": str(STEPS),
            "TRJSC_SAVE_ON_USR1": "1",
            "TRJSC_PG_TIMEOUT": "1800",
            "TORCHRUN_JSC_PEER_TIMEOUT": f"{PEER_TIMEOUT:g}",
            "TORCHRUN_JSC_REQUEUE": "1",
            "TORCHRUN_JSC_REQUEUE_MIN_RUN": "0",
            "TORCHRUN_JSC_REQUEUE_GRACE": "30",
            **env,
        }.items()
    )
    out = wd / f"{name}-${{SLURM_RESTART_COUNT:-0}}-%t.out"
    path = wd / f"{name}.sbatch"
    flags = "".join(f"#SBATCH {flag}\n" for flag in sbatch)
    path.write_text(
        f"#!/bin/bash\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n{flags}"
        f"export {exports}\n"
        + (f'[ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && export {later}\n' if later else "")
        + 'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"srun --output={out} --error={out} bash -c"
        # the wrapper outlives Slurm's SIGUSR1 (a trap, not an ignore, which its child inherits)
        ' \'trap true USR1; TORCHRUN_JSC_NODE_RANK=$SLURM_NODEID "$@"; rc=$?;'
        ' echo "TRJSC_AGENT_EXIT rc=$rc"; exit $rc\''
        f" x {command}\n"
    )
    return path


def outputs(cluster: Cluster, name: str, run: int, nodes: int) -> List[str]:
    wd = cluster.workdir
    assert wd is not None
    paths = [wd / f"{name}-{run}-{t}.out" for t in range(nodes)]
    return [p.read_text(errors="replace") if p.exists() else "" for p in paths]


def said(cluster: Cluster, name: str, runs: int, nodes: int, job: str = "") -> str:
    keep = ("torchrun_jsc", "TRJSC_RESUMED", "TRJSC_SAVED", "TRJSC_DONE", "TRJSC_AGENT", "rror")
    parts = []
    for run in range(runs):
        for t, text in enumerate(outputs(cluster, name, run, nodes)):
            mine = [
                ln for ln in text.splitlines() if any(k in ln for k in keep) and "frame #" not in ln
            ]
            parts.append(f"----- run {run} task {t}\n" + "\n".join(mine[-30:]))
    batch = cluster.job_output_path(job) if job else None
    if batch is not None and batch.exists():
        parts.append("----- the batch script\n" + batch.read_text(errors="replace")[-3000:])
    return "\n".join(parts)


def job_fields(cluster: Cluster, job: str) -> Dict[str, str]:
    r = cluster.login(["scontrol", "-o", "show", "job", job], timeout=30)
    return dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)


def wait_for(cluster: Cluster, name: str, run: int, nodes: int, text: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while sum(text in t for t in outputs(cluster, name, run, nodes)) < nodes:
        assert time.monotonic() < deadline, f"{text!r}\n{said(cluster, name, run + 1, nodes)}"
        time.sleep(0.3)


def wait_requeued(cluster: Cluster, job: str, restarts: int, limit: float = 120.0) -> None:
    """Until the job is pending again after its ``restarts``-th requeue."""
    deadline = time.monotonic() + limit
    while True:
        fields = job_fields(cluster, job)
        if fields.get("JobState") == "PENDING" and fields.get("Restarts") == str(restarts):
            break
        assert time.monotonic() < deadline, f"job {job} not requeued: {fields}"
        time.sleep(0.3)


def wait_ended(cluster: Cluster, job: str, limit: float) -> str:
    deadline = time.monotonic() + limit
    while True:
        state = job_fields(cluster, job).get("JobState", "")
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", ""):
            return state
        if time.monotonic() > deadline:
            cluster.login(["scancel", job], timeout=30)
            return f"still {state} after {limit:.0f} s"
        time.sleep(0.3)


def assert_resumed(
    texts: Sequence[str], nodes: int, context: str, steps: int = STEPS
) -> Dict[int, Run]:
    """The run trained on ``nodes`` nodes from a checkpoint after step 0 to the end, every
    step right, in node order, every agent exit 0."""
    runs = {t: last_run(text) for t, text in enumerate(texts)}
    for t, run in runs.items():
        assert run.world == nodes, f"task {t}: {run}\n{context}"
        assert run.resumed_from > 0, f"task {t}: {run}\n{context}"
        wanted = set(range(run.resumed_from + 1, steps + 1))
        assert set(run.steps) == wanted and all(run.steps.values()), f"task {t}: {run}\n{context}"
        assert run.done_ok, f"task {t}: {run}\n{context}"
        assert "TRJSC_AGENT_EXIT rc=0" in texts[t], f"task {t}\n{context}"
    assert [runs[t].rank for t in sorted(runs)] == list(range(nodes)), context
    assert len({r.resumed_from for r in runs.values()}) == 1, context
    return runs


def host_of(text: str) -> int:
    """The node a task's workload ran on (``host=nodeN``)."""
    found = re.search(r"host=node(\d+) ", text)
    assert found, text[-2000:]
    return int(found.group(1))


def saved_step(texts: Sequence[str], context: str) -> int:
    steps = {int(m) for t in texts for m in re.findall(r"^TRJSC_SAVED .* step=(\d+)", t, re.M)}
    assert len(steps) == 1, f"{steps}\n{context}"
    return steps.pop()


def frozen_until_excluded(
    cluster: Cluster,
    name: str,
    run: int,
    job: str,
    node: int,
    line: str,
    tasks: Iterable[int],
    excluded: Sequence[str] = (),
) -> None:
    """``node`` frozen until ``tasks`` of run ``run`` (0: the first) of the 4-node job said
    ``line``, then thawed, as Slurm would take a dead node out (its frozen processes keep the
    old run from ending); the job must then be held with that node excluded (or ``excluded``,
    as Slurm spells the list)."""
    cluster.freeze_node(node)
    try:
        deadline = time.monotonic() + PEER_TIMEOUT + 90
        while not all(line in outputs(cluster, name, run, 4)[t] for t in tasks):
            assert time.monotonic() < deadline, f"{line!r}\n{said(cluster, name, run + 1, 4, job)}"
            time.sleep(0.3)
    finally:
        cluster.thaw_node(node)
    fields = job_fields(cluster, job)
    assert fields.get("ExcNodeList") in (excluded or [f"node{node}"]), fields


@FIRST_ONLY
def test_the_warning_then_a_lost_node_requeue_the_job_which_resumes_each_time(
    five_cluster: Cluster,
) -> None:
    """4 of 5 nodes, --requeue, the setting on, --max_restarts=0; three runs of one job (one
    scenario, not two, to keep CI short). Run 1: ``scancel --signal=USR1`` (what Slurm sends
    before the time limit) → the workers save and end, one line per node, no failure reported;
    requeued. Run 2 resumes from that checkpoint; one of its nodes frozen → lost, the job
    cannot go on → requeued held with that node excluded, released. Run 3, without it, resumes
    and completes."""
    cluster, name = five_cluster, "twice"
    job = cluster.sbatch(batch_script(cluster, name, 4, {}))
    wait_for(cluster, name, 0, 4, "step=8 ", 150)
    sent = cluster.login(["scancel", "--signal=USR1", job], timeout=30)
    assert sent.returncode == 0, sent.output
    wait_requeued(cluster, job, 1)
    warned = (
        f"torchrun_jsc: requeue 1 of 3: job {job} requeued after SIGUSR1 (Slurm's warning"
        " before the time limit); its next run resumes from the checkpoint"
    )
    deadline = time.monotonic() + 30  # the first run's output files are complete
    while not all(warned in t for t in outputs(cluster, name, 0, 4)):
        assert time.monotonic() < deadline, said(cluster, name, 2, 4, job)
        time.sleep(0.3)
    first = outputs(cluster, name, 0, 4)
    context = said(cluster, name, 1, 4, job)
    for t, text in enumerate(first):
        assert text.count(warned) == 1, f"task {t}\n{context}"
        assert "first failure" not in text and "Traceback" not in text, f"task {t}\n{context}"
        assert "stopped by" not in text, f"task {t}\n{context}"
    step = saved_step(first, context)
    # run 2: it resumes from the saved step; then its last task's node is lost
    wait_for(cluster, name, 1, 4, f"step={step + 4} ", 150)
    second = outputs(cluster, name, 1, 4)
    resumed = {int(m) for t in second for m in re.findall(r"^TRJSC_RESUMED .* from=(\d+)", t, re.M)}
    assert resumed == {step}, f"{resumed}\n{said(cluster, name, 2, 4, job)}"
    node = host_of(second[3])
    line = (
        f"torchrun_jsc: requeue 2 of 3: job {job} requeued after a failure it could not recover"
        f" from, without node{node}; its next run resumes from the checkpoint"
    )
    frozen_until_excluded(cluster, name, 1, job, node, line, range(3))
    wait_requeued(cluster, job, 2)
    state = wait_ended(cluster, job, 240)
    context = said(cluster, name, 3, 4, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    second = outputs(cluster, name, 1, 4)
    for t, text in enumerate(second[:3]):
        assert text.count(line) == 1, f"task {t}\n{context}"
        assert f"first failure: node{node} (node rank 3)" in text, f"task {t}\n{context}"
    third = outputs(cluster, name, 2, 4)
    assert all(f"host=node{node} " not in t for t in third), context
    runs = assert_resumed(third, 4, context)
    assert min(r.resumed_from for r in runs.values()) >= step, context
    # nothing of a requeue in the last run but the count in its summary line
    assert not [
        ln for t in third for ln in t.splitlines() if "requeue" in ln and "summary:" not in ln
    ], context
    # the event log, by default in the submit directory: every run appended to it
    log = Path(job_fields(cluster, job)["WorkDir"]) / f"torchrun_jsc-{job}.events.jsonl"
    found = entry.read(log.read_text().splitlines())
    assert found.skipped == 0, log.read_text()
    by_run = {r: [e for e in found.entries if e.run == r] for r in (0, 1, 2)}
    assert {e.job for e in found.entries} == {job}
    assert sorted({e.run for e in found.entries}) == [0, 1, 2], log.read_text()
    for r, events in by_run.items():  # one writer per run: its host
        assert [e.event for e in events[:2]] == ["launch", "round"], f"run {r}: {events}"
        assert len({e.node for e in events}) == 1, f"run {r}: {events}"
    requeues = [
        (e.run, e.get("excluded"), e.get("done")) for e in found.entries if e.event == "requeue"
    ]
    assert requeues == [(0, [], True), (1, [f"node{node}"], True)], log.read_text()
    lost = [(e.run, e.get("lost"), e.get("next")) for e in found.entries if e.event == "lost"]
    assert lost == [(1, entry.node(f"node{node}", 3), "stop")], log.read_text()
    assert [e.get("exit_code") for e in by_run[2] if e.event == "end"] == [0], log.read_text()
    printed = subprocess.run(
        [sys.executable, "-m", "torchrun_jsc.report", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert printed.startswith(
        f"job {job}: 3 runs, 3 rounds, 1 node lost, 0 recovered inside the allocation, 2 requeues;"
    ), printed


def lost_then_requeued(
    cluster: Cluster, name: str, node: int, line: str, tasks: Sequence[int]
) -> Tuple[List[str], str, str]:
    """A 4-node job with the setting trains; ``node`` is frozen until ``tasks`` (of the first
    run) said ``line``, then thawed, as Slurm would take a dead node out (its frozen processes
    keep the old run from ending). The job must be requeued with that node excluded, and its
    next run, without it, resume and complete. Returns the first run's outputs, the line with
    the job's id, and the context for messages."""
    job = cluster.sbatch(batch_script(cluster, name, 4, {}))
    wait_for(cluster, name, 0, 4, "step=12 ", 150)
    line = line.replace("{job}", job)
    frozen_until_excluded(cluster, name, 0, job, node, line, tasks)
    wait_requeued(cluster, job, 1)
    state = wait_ended(cluster, job, 240)
    context = said(cluster, name, 2, 4, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    second = outputs(cluster, name, 1, 4)
    assert all(f"host=node{node} " not in t for t in second), context
    assert_resumed(second, 4, context)
    return outputs(cluster, name, 0, 4), line, context


@pytest.mark.slow(reason="slow (per release in the matrix): TRJSC_SLOW_SCENARIOS=1")
def test_a_lost_rendezvous_host_is_stood_in_for_and_excluded(five_cluster: Cluster) -> None:
    """4 of 5 nodes, --max_restarts=0: node0, the rendezvous host, frozen → the others lose it;
    node rank 1 requeues in its place without node0 (node ranks 2 and 3 see it done); the next
    run, on node1-4 with node1 as its host, resumes and completes."""
    line = (
        "torchrun_jsc: requeue 1 of 3: job {job} requeued after a failure it could not recover"
        " from (the rendezvous host lost), without node0; its next run resumes from the"
        " checkpoint"
    )
    first, _, context = lost_then_requeued(five_cluster, "hostless", 0, line, (1,))
    done_by_other = "was requeued already (by another node)"
    for t in (2, 3):
        assert first[t].count(done_by_other) == 1, f"task {t}\n{context}"
    for t in (1, 2, 3):
        assert "first failure: the rendezvous host" in first[t], f"task {t}\n{context}"


#: The requeue's settings as a user leaves them (the other scenarios set the minimum run to 0).
DEFAULTS = {"TORCHRUN_JSC_REQUEUE_MIN_RUN": "600", "TORCHRUN_JSC_REQUEUE_GRACE": "30"}


def kill_task(cluster: Cluster, node: int) -> List[int]:
    """SIGKILL the job's processes on ``node`` (its agent, workers and their helpers), not its
    slurmstepd: a training node whose processes died (the node stays up for Slurm)."""
    pids = [p for p in cluster._node_procs(node) if "slurmstepd" not in cmdline(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


@IN_THE_MATRIX
def test_a_node_killed_early_is_requeued_without_it_with_the_default_settings(
    five_cluster: Cluster,
) -> None:
    """4 of 5 nodes, --max_restarts=0, the requeue's minimum run at its default (600 s): node
    rank 3's processes SIGKILLed early in training → every node names it as the first failure,
    and the job is requeued without it whatever the run's length (a lost node, not a failing
    script); the next run resumes and completes."""
    cluster, name = five_cluster, "killed"
    job = cluster.sbatch(batch_script(cluster, name, 4, DEFAULTS))
    wait_for(cluster, name, 0, 4, "step=8 ", 150)
    node = host_of(outputs(cluster, name, 0, 4)[3])
    assert kill_task(cluster, node), f"nothing to kill on node{node}"
    wait_requeued(cluster, job, 1)
    state = wait_ended(cluster, job, 240)
    context = said(cluster, name, 2, 4, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    assert job_fields(cluster, job).get("ExcNodeList") == f"node{node}", context
    line = (
        f"torchrun_jsc: requeue 1 of 3: job {job} requeued after a failure it could not recover"
        f" from, without node{node}; its next run resumes from the checkpoint"
    )
    first = outputs(cluster, name, 0, 4)
    for t, text in enumerate(first[:3]):
        assert text.count(line) == 1, f"task {t}\n{context}"
        assert f"first failure: node{node} (node rank 3) stopped responding" in text, context
        assert "no requeue" not in text, f"task {t}\n{context}"
    second = outputs(cluster, name, 1, 4)
    assert all(f"host=node{node} " not in t for t in second), context
    assert_resumed(second, 4, context)


@pytest.mark.slow(reason="slow (per release in the matrix): TRJSC_SLOW_SCENARIOS=1")
def test_the_warning_requeues_a_run_shorter_than_the_minimum_run(
    main_cluster: Cluster,
) -> None:
    """2 nodes, the requeue's minimum run at its default (600 s): Slurm's warning (``scancel
    --signal=USR1``) after a bit more than the first minute of training → requeued (the
    warning is judged by its cause, not by the run's length); the next run resumes from the
    saved step and completes."""
    cluster, name = main_cluster, "warned"
    env = {**DEFAULTS, "TRJSC_STEP_SECONDS": "2"}  # 120 s of steps: the warning comes first
    job = cluster.sbatch(batch_script(cluster, name, 2, env, later="TRJSC_STEP_SECONDS=0.25"))
    wait_for(cluster, name, 0, 2, "TRJSC_RESUMED ", 150)
    time.sleep(65)  # past the first minute, in which the warning is refused
    sent = cluster.login(["scancel", "--signal=USR1", job], timeout=30)
    assert sent.returncode == 0, sent.output
    wait_requeued(cluster, job, 1)
    state = wait_ended(cluster, job, 240)
    context = said(cluster, name, 2, 2, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    warned = f"torchrun_jsc: requeue 1 of 3: job {job} requeued after SIGUSR1"
    assert all(t.count(warned) == 1 for t in outputs(cluster, name, 0, 2)), context
    step = saved_step(outputs(cluster, name, 0, 2), context)
    runs = assert_resumed(outputs(cluster, name, 1, 2), 2, context)
    assert {r.resumed_from for r in runs.values()} == {step}, context


def test_a_script_that_exits_with_the_stop_code_is_not_requeued(main_cluster: Cluster) -> None:
    """A script whose workers exit with 99 (TORCHRUN_JSC_REQUEUE_STOP_CODE's default) after a
    run longer than the minimum (0 here): not requeued, one line per node naming the code; the
    job ends FAILED, never requeued (first interpreter only: torchrun_jsc's own decision)."""
    cluster, name = main_cluster, "stopcode"
    wd = cluster.workdir
    assert wd is not None
    script = wd / "stopcode.py"
    script.write_text("import sys\nprint('TRJSC_GIVING_UP', flush=True)\nsys.exit(99)\n")
    job = cluster.sbatch(batch_script(cluster, name, 2, {}, script=script))
    state = wait_ended(cluster, job, 180)
    context = said(cluster, name, 1, 2, job)
    assert state == "FAILED", f"{state}\n{context}"
    no = (
        "torchrun_jsc: no requeue: the training script exited with code 99"
        " (TORCHRUN_JSC_REQUEUE_STOP_CODE): it asks not to be requeued"
    )
    for t, text in enumerate(outputs(cluster, name, 0, 2)):
        assert text.count(no) == 1, f"task {t}\n{context}"
        assert "exited with code 99" in text, f"task {t}\n{context}"
    assert job_fields(cluster, job).get("Restarts") == "0", context


@IN_THE_MATRIX
def test_a_job_that_fails_at_once_is_requeued_at_most_the_maximum(
    main_cluster: Cluster,
) -> None:
    """A script that fails at once, TORCHRUN_JSC_REQUEUE_MAX=1: requeued once, then the second
    run stops saying why not; the job ends FAILED (first interpreter only: the guard is
    torchrun_jsc's own)."""
    cluster, name = main_cluster, "broken"
    wd = cluster.workdir
    assert wd is not None
    broken = wd / "broken.py"
    broken.write_text("import sys\nprint('TRJSC_BROKEN', flush=True)\nsys.exit(3)\n")
    env = {"TORCHRUN_JSC_REQUEUE_MAX": "1"}
    job = cluster.sbatch(batch_script(cluster, name, 2, env, script=broken))
    wait_requeued(cluster, job, 1)
    state = wait_ended(cluster, job, 180)
    context = said(cluster, name, 2, 2, job)
    assert state == "FAILED", f"{state}\n{context}"
    again = f"torchrun_jsc: requeue 1 of 1: job {job} requeued after a failure"
    assert all(t.count(again) == 1 for t in outputs(cluster, name, 0, 2)), context
    no = "torchrun_jsc: no requeue: 1 of 1 requeues done (TORCHRUN_JSC_REQUEUE_MAX=1)"
    for t, text in enumerate(outputs(cluster, name, 1, 2)):
        assert text.count(no) == 1, f"task {t}\n{context}"
        assert "exited with code 3" in text, f"task {t}\n{context}"
    assert job_fields(cluster, job).get("Restarts") == "1", context


def test_a_job_that_cannot_be_requeued_says_so_and_ends_as_without(
    main_cluster: Cluster,
) -> None:
    """--no-requeue with the setting: the warning signal → one line per node naming the fix;
    the workers, which saved and ended, end the job as they would without the setting (first
    interpreter only: Slurm's answer and torchrun_jsc's decision)."""
    cluster, name = main_cluster, "refused"
    job = cluster.sbatch(batch_script(cluster, name, 2, {}, sbatch=("--no-requeue",)))
    wait_for(cluster, name, 0, 2, "step=8 ", 150)
    sent = cluster.login(["scancel", "--signal=USR1", job], timeout=30)
    assert sent.returncode == 0, sent.output
    state = wait_ended(cluster, job, 120)
    context = said(cluster, name, 1, 2, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    line = "torchrun_jsc: no requeue: the job is not requeueable: submit it with sbatch --requeue"
    for t, text in enumerate(outputs(cluster, name, 0, 2)):
        assert text.count(line) == 1, f"task {t}\n{context}"
        assert "TRJSC_SAVED" in text and "TRJSC_AGENT_EXIT rc=0" in text, f"task {t}\n{context}"
        assert "Traceback" not in text, f"task {t}\n{context}"


@pytest.mark.slow(reason="slow (a real time limit, minutes): TRJSC_SLOW_SCENARIOS=1")
def test_a_real_time_limit_requeues_and_completes(five_cluster: Cluster) -> None:
    """``--time=3 --signal=USR1@60``: Slurm's own warning before the time limit requeues the
    job; the second run resumes and completes within its limit. (Slurm may send the warning
    up to 60 s early, so between 60 and 120 s into the run, before the first run's 120 s of
    steps end; the second run's steps are fast and end well before its warning.)"""
    cluster, name = five_cluster, "timed"
    env = {"TRJSC_STEP_SECONDS": "2"}
    sbatch = ("--requeue", "--time=3", "--signal=USR1@60")
    script = batch_script(cluster, name, 2, env, sbatch=sbatch, later="TRJSC_STEP_SECONDS=0.1")
    job = cluster.sbatch(script)
    wait_requeued(cluster, job, 1, limit=240)
    state = wait_ended(cluster, job, 200)
    context = said(cluster, name, 2, 2, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    step = saved_step(outputs(cluster, name, 0, 2), context)
    runs = assert_resumed(outputs(cluster, name, 1, 2), 2, context)
    assert {r.resumed_from for r in runs.values()} == {step}, context


def on(cluster: Cluster, name: str, ranks: Sequence[int]) -> List[str]:
    """The outputs of the first run's tasks ``ranks`` of the 3-node job."""
    texts = outputs(cluster, name, 0, 3)
    return [texts[r] for r in ranks]


@pytest.mark.slow(reason="slow (per release in the matrix): TRJSC_SLOW_SCENARIOS=1")
@pytest.mark.parametrize("first_lost", [0, 1], ids=["host", "node"])
def test_a_requeue_leaves_out_the_nodes_the_job_went_on_without(
    five_cluster: Cluster, first_lost: int
) -> None:
    """3 of 5 nodes, --nnodes=2:3, --max_restarts=1, requeue on. A node frozen: node rank 0,
    the rendezvous host (the next node hosts: a handover), or node rank 1 (the job goes on
    smaller); either way the restart, training goes on with 2 nodes, and the frozen node,
    thawed, ends without requeueing. Then the last node frozen → no restarts left → the job is
    requeued without both nodes (the first loss wrote no failure: the job went on; a host's
    loss was known only to the store that went with it); its next run, on the 3 nodes left,
    resumes and completes without them."""
    cluster, name = five_cluster, f"went-on-{first_lost}"
    steps = 160  # long enough to lose a second node after the first
    env = {"TRJSC_STEPS": str(steps)}
    job = cluster.sbatch(batch_script(cluster, name, 3, env, max_restarts=1, nnodes="2:3"))
    wait_for(cluster, name, 0, 3, "step=8 ", 150)
    first = outputs(cluster, name, 0, 3)
    lost, last = host_of(first[first_lost]), host_of(first[2])
    going = [r for r in range(3) if r != first_lost]  # the node ranks that go on
    if first_lost == 0:
        restart = "torchrun_jsc: restart 1 of 1: the rendezvous host "
        going_on = "lost; going on with 2 nodes, node rank 1 at "
    else:
        restart = f"torchrun_jsc: restart 1 of 1: node{lost} (node rank 1) lost; "
        going_on = "going on with 2 nodes"
    cluster.freeze_node(lost)
    try:
        deadline = time.monotonic() + PEER_TIMEOUT + 90
        while not all(restart in t and going_on in t for t in on(cluster, name, going)):
            assert time.monotonic() < deadline, said(cluster, name, 1, 3, job)
            time.sleep(0.3)
    finally:
        cluster.thaw_node(lost)  # it ends on its own, out of the round
    deadline = time.monotonic() + 90  # it trains on, with 2 nodes
    while not all(
        "TRJSC_STEP " in t.split("TRJSC_RESUMED ")[-1] and t.count("TRJSC_RESUMED ") == 2
        for t in on(cluster, name, going)
    ):
        assert time.monotonic() < deadline, said(cluster, name, 1, 3, job)
        time.sleep(0.3)
    line = (
        f"torchrun_jsc: requeue 1 of 3: job {job} requeued after a failure it could not recover"
        f" from, without node{lost}, node{last}; its next run resumes from the checkpoint"
    )
    spelled = {f"node{lost},node{last}", f"node[{lost},{last}]"}
    spelled |= {f"node{last},node{lost}", f"node[{last},{lost}]"}
    requeuer = going[0]  # the node that serves the store now
    frozen_until_excluded(cluster, name, 0, job, last, line, (requeuer,), sorted(spelled))
    wait_requeued(cluster, job, 1)
    state = wait_ended(cluster, job, 240)
    context = said(cluster, name, 2, 3, job)
    assert state == "COMPLETED", f"{state}\n{context}"
    before = outputs(cluster, name, 0, 3)
    assert before[requeuer].count(line) == 1, context
    assert f"first failure: node{last} (node rank 2)" in before[requeuer], context
    # the node lost first, thawed, ended on its own: it did not requeue the job that went on
    # (it says so, unless the requeue's SIGTERM, then SIGKILL 5 s later, ends it before)
    assert "this node did not run for" in before[first_lost], context
    assert "requeued after" not in before[first_lost], context
    after = outputs(cluster, name, 1, 3)
    assert all(f"host=node{n} " not in t for t in after for n in (lost, last)), context
    runs = assert_resumed(after, 3, context, steps)
    assert min(r.resumed_from for r in runs.values()) >= 5, context


@IN_THE_MATRIX
def test_a_host_cut_off_alone_does_not_requeue_while_the_others_go_on(
    five_cluster: Cluster,
) -> None:
    """4 of 5 nodes, ``--nnodes=1:4 --max_restarts=3``, the setting on: the rendezvous host cut
    off from the other three (a partition; every node still reaches Slurm). Its group of 1 may
    not go on and may not requeue: Slurm does not say the others are down, and they are
    training on. The other three hand over, resume from the checkpoint with 3 ranks and
    complete; the job is never requeued. (srun, on the cut-off node, hears of the other tasks'
    ends only once the cut heals: Slurm's step traffic crosses the same network here.)"""
    cluster, name = five_cluster, "cut"
    job = cluster.sbatch(batch_script(cluster, name, 4, {}, max_restarts=3, nnodes="1:4"))
    wait_for(cluster, name, 0, 4, "step=12 ", 150)
    nodes = [host_of(t) for t in outputs(cluster, name, 0, 4)]
    host = nodes[0]
    cluster.partition([[host], [i for i in range(5) if i != host]])
    try:
        wait_for(cluster, name, 0, 4, "TRJSC_AGENT_EXIT ", 240)
    finally:
        cluster.heal()
    state = wait_ended(cluster, job, 120)
    context = said(cluster, name, 2, 4, job)
    assert state in ("COMPLETED", "FAILED"), f"{state}\n{context}"
    assert job_fields(cluster, job).get("Restarts") == "0", context
    first = outputs(cluster, name, 0, 4)
    cut = first[0]
    assert cut.count("TRJSC_RESUMED ") == 1 and "world=1 " not in cut, context
    assert "cannot go on: 1 of the job's 4 nodes is left here" in cut, context
    no = (
        "torchrun_jsc: no requeue: this node's group was too small to go on, and Slurm does not"
        " say that the lost nodes are down: they may be training on without it"
    )
    assert cut.count(no) == 1 and "TRJSC_AGENT_EXIT rc=1" in cut, context
    assert "requeue 1 of" not in "".join(first), context
    assert_resumed(first[1:], 3, context)
    went_on = "restart 1 of 3: the rendezvous host"
    assert all(t.count(went_on) == 1 for t in first[1:]), context
