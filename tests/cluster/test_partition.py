"""A network partition never splits the job in two (issue 30): at most one group may ever
train.

Each scenario trains a 4-node job (``--max_restarts=3``, the smallest peer timeout, 10 s) and
then cuts the IB network between groups of its nodes (``Cluster.partition``: every node still
reaches the controller and its own group, and a packet across is lost without a trace, so the
sides see each other hang). Only one side may go on: it resumes from the checkpoint, every
step after the cut is right and it completes (exit 0); every node of the other side ends by
itself (exit 1), its last line saying why, and never trains again (no second
``TRJSC_RESUMED``). The workload (``jobs/resume.py``) checkpoints every 5 steps; agents are
started without Slurm (one per node, ``node_exec``), as in ``test_recovery.py``, and the
collective timeout is torch's default (1800 s).
"""

from __future__ import annotations

import re
import time
from typing import List, Sequence

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.recovery_jobs import (
    PEER_TIMEOUT,
    TO_FIRST_STEP,
    assert_resumed_and_completed,
    command,
    envs,
    every_node_exited,
    first_step_after,
    last_run,
    said,
    wait_for_step,
)
from tests.cluster.scenarios import FIRST_ONLY, IN_THE_MATRIX, Job
from torchrun_jsc.runtime.watch.vocabulary import Config
from torchrun_jsc.torch_defaults import TERM_GRACE

pytestmark = pytest.mark.cluster

#: A node cut off from the rest ends by itself within this long after the cut: it takes the
#: others (or its host) for lost after the peer timeout, and a node without its host waits
#: for the next host at most the failover wait (peer timeout + TERM grace + the agent's new
#: start, 100 s here) before it gives up; 30 s of margin for the 2-core machine.
CUT_OFF_ENDS = PEER_TIMEOUT + Config(peer_timeout=PEER_TIMEOUT, grace=TERM_GRACE).failover_wait + 30


def last_line(job: Job, node: int) -> str:
    """The last non-empty line node ``node``'s agent printed, the rendezvous host's summary
    line aside (it ends the run of the node that writes the event log)."""
    lines = [
        ln
        for ln in job.output(node).splitlines()
        if ln.strip() and not ln.startswith("torchrun_jsc: summary: ")
    ]
    return lines[-1] if lines else ""


def start(cluster: Cluster, jobs: List[Job], nnodes: str, name: str) -> Job:
    """A 4-node job with 3 restarts, trained to step 12 in its first round of 4."""
    job = Job(cluster, command(cluster, nnodes, 3, "last_call_timeout=5"), envs(cluster, 4, name))
    jobs.append(job)
    job.wait_for("TRJSC_TRAINING")
    first = {i: last_run(job.output(i)).world for i in range(4)}
    assert first == dict.fromkeys(range(4), 4), f"{first}\n{said(job)}"
    wait_for_step(job, 0, 12)
    return job


def goes_on(job: Job, nodes: Sequence[int], world: int, limit: float) -> float:
    """``nodes`` train in a new round, complete it with ``world`` ranks, resumed from the
    checkpoint, and exit 0, each one's last line its worker's right total; the seconds until
    the new round's first step."""
    to_step = first_step_after(job, nodes[0], 1, TO_FIRST_STEP + 30)
    job.wait_exit(nodes, limit)
    every_node_exited(job, nodes, 0)
    assert_resumed_and_completed(job, nodes, world)
    for i in nodes:
        done = re.compile(rf"^TRJSC_DONE host=node{i} rank=\d+ world={world} acc=(\d+) expect=\1$")
        assert done.match(last_line(job, i)), f"node{i}: {last_line(job, i)!r}\n{said(job)}"
    return to_step


def never_trains_again(job: Job, nodes: Sequence[int], cut_at: float) -> str:
    """``nodes`` end by themselves (exit 1) within :data:`CUT_OFF_ENDS` of the cut, with no
    second worker group (never a round of their own), each one saying once why it cannot go
    on, as its last line or followed only by the job's first failure (the line a node that
    watched the others ends with); the lines that say why, joined."""
    job.wait_exit(nodes, max(cut_at + CUT_OFF_ENDS - time.monotonic(), 1.0))
    every_node_exited(job, nodes, 1, f" (bound {CUT_OFF_ENDS:.0f} s)")
    reasons = []
    for i in nodes:
        text = job.output(i)
        assert text.count("TRJSC_RESUMED ") == 1, f"node{i} trained again\n{said(job)}"
        why = [
            ln
            for ln in text.splitlines()
            if ln.startswith("torchrun_jsc: ") and "cannot go on:" in ln
        ]
        assert len(why) == 1, f"node{i}: {why}\n{said(job)}"
        line = last_line(job, i)
        assert line == why[0] or line.startswith("torchrun_jsc: first failure: "), (
            f"{line}\n{said(job)}"
        )
        after = [ln for ln in text[text.index(why[0]) :].splitlines() if "torchrun_jsc: " in ln]
        assert not any("restart " in ln or "going on with" in ln for ln in after), said(job)
        reasons.append(f"node{i}: {why[0]}")
    return "\n".join(reasons)


@FIRST_ONLY
def test_the_rendezvous_host_cut_off_alone_stops_and_the_majority_goes_on(
    jsc_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=1:4: node0, the rendezvous host, cut off from node1-3 after 12 steps. node0
    may not go on alone (1 of 4 nodes): it never starts a second round, never trains with
    world size 1, and ends by itself saying it cannot go on without a majority. node1-3 take
    the host for lost, hand over to node1 and go on with 3 from the checkpoint."""
    cluster = jsc_cluster
    job = start(cluster, job_cleanup, "1:4", "split-host")
    cluster.partition([[0], [1, 2, 3]])
    cut_at = time.monotonic()
    try:
        to_step = goes_on(job, [1, 2, 3], 3, 240)
        lines = never_trains_again(job, [0], cut_at)
    finally:
        cluster.heal()
    assert "world=1 " not in job.output(0), said(job)
    assert "a majority" in lines, f"{lines}\n{said(job)}"
    line = (
        "restart 1 of 3: the rendezvous host node0i:29500 lost; going on with 3 nodes, node rank"
        f" 1 at {cluster.ib_ip(1)}:29500 hosting the rendezvous"
    )
    for i in (1, 2, 3):
        assert "handing over:" in job.output(i) and line in job.output(i), said(job)
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    print(f"host alone: the cut to the new round's first step {to_step:.1f} s; {lines}")


@IN_THE_MATRIX
def test_two_against_two_only_the_hosts_side_goes_on(
    jsc_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=2:4, the IB network cut between node0,1 and node2,3: only the side with the
    rendezvous host (node0) goes on: restart, 2 ranks, resumed, completed. node2 and node3 end
    by themselves within the peer timeout + the failover wait + 30 s and never train again."""
    cluster = jsc_cluster
    job = start(cluster, job_cleanup, "2:4", "split-half")
    cluster.partition([[0, 1], [2, 3]])
    cut_at = time.monotonic()
    try:
        to_step = goes_on(job, [0, 1], 2, 240)
        lines = never_trains_again(job, [2, 3], cut_at)
    finally:
        cluster.heal()
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    print(f"two against two: the cut to the new round's first step {to_step:.1f} s\n{lines}")


@pytest.mark.slow(reason="slow (per release in the matrix): TRJSC_SLOW_SCENARIOS=1")
def test_a_node_cut_off_alone_never_trains_alone(
    jsc_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=1:4, node3 (not the rendezvous host) cut off from the others: it never trains
    alone and ends by itself; node0-2 go on with 3 from the checkpoint and complete."""
    cluster = jsc_cluster
    job = start(cluster, job_cleanup, "1:4", "split-one")
    cluster.partition([[0, 1, 2], [3]])
    cut_at = time.monotonic()
    try:
        to_step = goes_on(job, [0, 1, 2], 3, 240)
        lines = never_trains_again(job, [3], cut_at)
    finally:
        cluster.heal()
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    print(f"one alone: the cut to the new round's first step {to_step:.1f} s; {lines}")
