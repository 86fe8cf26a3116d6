"""Going on after a lost node, on the namespace cluster: a spare takes a frozen node's place,
a job goes on smaller after a node is killed, a thawed node ends on its own without touching
the new round, the next node hosts when the rendezvous host is lost, and a job that cannot go
on stops saying why.

The workload (``jobs/resume.py``) checkpoints every 5 steps and resumes, as torch's elastic
docs ask of a training script; every scenario checks the sums of every step after the restart,
that training resumed from the checkpoint (not from step 0) and completed, and every node's
exit code. Agents are started without Slurm (one per node, ``node_exec``); the collective
timeout is torch's default (1800 s), so nothing but torchrun_jsc and torch's rendezvous end or
re-form these jobs.
"""

from __future__ import annotations

import signal
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
    events_of,
    every_node_exited,
    every_node_failed,
    first_step_after,
    last_run,
    named,
    report,
    said,
    spare_of,
    spare_replaces_a_frozen_node,
    steps_into_round,
    until_every_node_said,
    wait_for_step,
    with_a_spare,
)
from tests.cluster.scenarios import FIRST_ONLY, IN_THE_MATRIX, Job, busy
from torchrun_jsc.runtime.watch.vocabulary import Config
from torchrun_jsc.torch_defaults import TERM_GRACE

pytestmark = pytest.mark.cluster


def test_a_spare_takes_a_frozen_nodes_place_then_the_job_goes_on_smaller(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=3:4 on 5 nodes: one waits as a spare; node0, the rendezvous host, joins the
    first round 8 s after the others and is in it all the same (they keep its place). A
    training node (not the rendezvous host) frozen → every live node says restart 1, the spare
    takes its place, training resumes from the checkpoint; the frozen node, thawed once the new
    round trains, ends on its own and disturbs nothing. Then another node SIGKILLed, no spare
    left → restart 2 on 3 nodes, resumed again, completed; every live node exits 0."""
    cluster = five_cluster
    job, spare, first = with_a_spare(
        cluster, job_cleanup, "two", "3:4", "last_call_timeout=5", host_late=8.0
    )
    job.wait_for("TRJSC_TRAINING", nodes=first)
    assert "TRJSC_RESUMED" not in job.output(spare), said(job)
    frozen = spare_replaces_a_frozen_node(cluster, job, spare, first, "two losses")
    killed = max(i for i in first if i not in (0, frozen))
    # the second loss, in the round the spare joined: no spare is left, 3 nodes may go on
    resumed = steps_into_round(job, 0, 2, 3)
    cluster.signal_node(killed, signal.SIGKILL)
    to_step = first_step_after(job, 0, 2, TO_FIRST_STEP + 30)
    print(f"two losses: the kill to the smaller round's first step {to_step:.1f} s")
    live = sorted(set(range(5)) - {frozen, killed})
    took = job.wait_exit(live, 240)
    job.wait_exit([frozen], 60)  # thawed during the second round: it ended on its own
    assert job.procs[frozen].returncode not in (None, 0), said(job)
    assert "torchrun_jsc: this node did not run for" in job.output(frozen), said(job)
    every_node_exited(job, live, 0)
    runs = assert_resumed_and_completed(job, live, 3)
    assert min(r.resumed_from for r in runs.values()) >= resumed, f"{runs}\n{said(job)}"
    shrunk = f"restart 2 of 3: node{killed} (node rank {killed}) lost; going on with 3 nodes"
    assert all(shrunk in job.output(i) for i in live), said(job)
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    assert job.wait_gone(list(range(5)), 20) == {}, said(job)
    print(f"two losses: every live node ended {took:.0f} s after the kill")
    # the event log: node0 (the host) wrote every event; each loss names its node
    events = events_of(cluster, "two")
    assert [e.event for e in events] == [
        "launch",
        "round",
        "lost",
        "round",
        "restart",
        "join",
        "lost",
        "round",
        "restart",
        "end",
    ], said(job)
    assert {e.node for e in events} == {"node0"}
    rounds = [e for e in events if e.event == "round"]
    assert [r.get("restart") for r in rounds] == [0, 1, 2]
    assert [r.get("members") for r in rounds] == [
        [named(i) for i in first],
        [named(i) for i in sorted({*first, spare} - {frozen})],
        [named(i) for i in live],
    ]
    losses = [e for e in events if e.event == "lost"]
    assert [(e.get("lost"), e.get("detection"), e.get("next")) for e in losses] == [
        (named(frozen), "heartbeat", "restart"),
        (named(killed), "heartbeat", "restart"),
    ]
    restarts = [e for e in events if e.event == "restart"]
    assert [(e.get("left"), e.get("came")) for e in restarts] == [
        ([named(frozen)], [named(spare)]),
        ([named(killed)], []),
    ]
    joins = [e for e in events if e.event == "join"]
    assert [(e.get("spare"), e.get("restart")) for e in joins] == [(named(spare), 1)]
    assert events[-1].get("exit_code") == 0
    summary = [ln for ln in job.output(0).splitlines() if "torchrun_jsc: summary:" in ln]
    assert len(summary) == 1, said(job)
    assert "3 rounds, 2 restarts; lost node" in summary[0], said(job)
    assert summary[0].count("training again after") == 2, said(job)
    # the report counts the same, and draws one row per node (5): 0.4 inch each at 100 dpi
    printed, (width, height) = report(cluster, "two")
    assert printed.startswith(
        "job (outside Slurm): 1 run, 3 rounds, 2 nodes lost, 2 recovered inside the"
        " allocation, 0 requeues;"
    ), printed
    assert (width, height) == (1000, round(100 * (1.2 + 0.4 * 5))), printed


@pytest.mark.slow(reason="slow: TRJSC_SLOW_SCENARIOS=1 (by hand; the matrix leaves it out)")
def test_a_spare_takes_a_frozen_nodes_place_with_default_settings(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """Issue 21's first scenario as a user runs it: --nnodes=4 on 5 nodes, --max_restarts=3,
    the default peer timeout (60 s) and collective timeout (1800 s); a training node (not the
    rendezvous host) frozen → the spare takes its place, the new round trains within the peer
    timeout + 60 s of the freeze and completes on 4 nodes; every live node exits 0. (Slow: by
    hand, like the other default-settings scenarios; the mechanism runs per release with 10 s.)"""
    cluster = five_cluster
    node_envs = envs(cluster, 5, "defaults")
    for env in node_envs:
        del env["TORCHRUN_JSC_PEER_TIMEOUT"]
    job = Job(cluster, command(cluster, "4", 3), node_envs)
    job_cleanup.append(job)
    spare = spare_of(job)
    first = [i for i in range(5) if i != spare]
    job.wait_for("TRJSC_TRAINING", nodes=first)
    frozen = max(i for i in first if i != 0)
    wait_for_step(job, 0, 12)
    cluster.freeze_node(frozen)
    to_step = first_step_after(job, spare, 0, 60.0 + 90)
    print(f"default settings: the freeze to the new round's first step {to_step:.1f} s")
    live = [i for i in range(5) if i != frozen]
    took = job.wait_exit(live, 240)
    cluster.thaw_node(frozen)
    every_node_exited(job, live, 0)
    assert_resumed_and_completed(job, live, 4)
    line = f"restart 1 of 3: node{frozen} (node rank {frozen}) lost; going on with node{spare}"
    assert all(line in job.output(i) for i in live if i != spare), said(job)
    assert to_step < 60.0 + 60.0, f"{to_step:.0f} s\n{said(job)}"
    # thawed after the job ended: it ends on its own; its workers get the grace (30 s) first
    job.wait_exit([frozen], 90)
    left = job.wait_gone(list(range(5)), 60)
    assert left == {}, f"{left}\n{said(job)}"
    print(f"default settings: every live node ended {took:.0f} s after the new round trained")


@pytest.mark.slow(reason="per release: TRJSC_SLOW_SCENARIOS=1 (scripts/torch-matrix sets it)")
def test_a_smaller_job_goes_on_after_a_node_is_killed(
    jsc_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=3:4 on 4 nodes, every process of node3 SIGKILLed: the job resumes from its
    checkpoint on 3 nodes and completes; every live node says the restart and exits 0. (The
    two-losses scenario shrinks after a kill in CI; this one runs per release in the matrix.)"""
    cluster = jsc_cluster
    job = Job(
        cluster, command(cluster, "3:4", 3, "last_call_timeout=5"), envs(cluster, 4, "smaller")
    )
    job_cleanup.append(job)
    job.wait_for("TRJSC_TRAINING")
    wait_for_step(job, 0, 12)
    cluster.signal_node(3, signal.SIGKILL)
    to_step = first_step_after(job, 0, 1, TO_FIRST_STEP + 30)
    print(f"smaller: fault to the new round's first step {to_step:.1f} s")
    job.wait_exit([0, 1, 2], 240)
    every_node_exited(job, range(3), 0)
    assert_resumed_and_completed(job, [0, 1, 2], 3)
    for i in range(3):
        assert "restart 1 of 3: node3 (node rank 3) lost; going on with 3 nodes" in job.output(i), (
            str(job)
        )
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{job}"
    assert job.wait_gone(list(range(4)), 20) == {}, str(job)


@IN_THE_MATRIX
def test_a_job_that_cannot_go_on_stops_saying_why(
    main_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=4 on 4 nodes with restarts allowed but no spare: a frozen node stops the job
    as without recovery, and the line says why it could not go on. (torchrun_jsc's own
    decision: on the first interpreter only.)"""
    cluster = main_cluster
    job = Job(cluster, command(cluster, "4", 2), envs(cluster, 4, "cannot"))
    job_cleanup.append(job)
    job.wait_for("TRJSC_TRAINING")
    wait_for_step(job, 0, 8)
    cluster.freeze_node(3)
    took = job.wait_exit([0, 1, 2], 120)
    every_node_failed(job, range(3))
    why = "cannot go on: 3 nodes left, --nnodes needs at least 4, and no spare waits"
    assert why in job.output(0), str(job)
    assert "restart 1 of" not in "".join(job.output(i) for i in range(3)), str(job)
    assert took < 60 + PEER_TIMEOUT, f"{took:.0f} s\n{job}"


def next_host(members: Sequence[int], lost: int) -> int:
    """The node that hosts after ``lost``: the next of ``members`` in node-rank order."""
    return min(i for i in members if i != lost)


@FIRST_ONLY
def test_the_next_node_hosts_when_the_rendezvous_host_is_lost_twice(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=3:4 on 5 nodes, one a spare. node0, which serves the rendezvous store, frozen
    → every other node, the spare too, starts its agent again and the next node of the round in
    node-rank order hosts the next round at its own address (restart 1, the spare in the lost
    host's place), training resumes from the checkpoint; node0, thawed, ends on its own. Then
    that new host SIGKILLed (its connections reset at once) → the next one hosts (restart 2),
    the job goes on with 3 nodes and completes; every live node exits 0."""
    cluster = five_cluster
    job, spare, first = with_a_spare(cluster, job_cleanup, "failover", "3:4", "last_call_timeout=5")
    job.wait_for("TRJSC_TRAINING", nodes=first)
    wait_for_step(job, first[0], 12)
    cluster.freeze_node(0)
    host1 = next_host(first, 0)
    second = sorted(set(range(1, 5)))
    to_step = first_step_after(job, host1, 1, TO_FIRST_STEP + 30)
    print(f"failover: the freeze of the host to the new round's first step {to_step:.1f} s")
    line = (
        "restart 1 of 3: the rendezvous host node0i:29500 lost; going on with 4 nodes, node rank"
        f" {host1} at {cluster.ib_ip(host1)}:29500 hosting the rendezvous"
    )
    until_every_node_said(job, second, line)
    joined = "torchrun_jsc: spare: this node takes a lost node's place (restart 1 of 3; 4 nodes)"
    assert joined in job.output(spare), said(job)
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    cluster.thaw_node(0)  # it must end on its own and not disturb the new round
    # the second host loss, right away (training is short): the new host killed, its
    # connections reset at once
    resumed = steps_into_round(job, host1, 2, 3)
    host2 = next_host(second, host1)
    groups = job.output(host2).count("TRJSC_RESUMED ")
    cluster.signal_node(host1, signal.SIGKILL)
    to_step = first_step_after(job, host2, groups, TO_FIRST_STEP + 30)
    print(f"failover: the kill of the new host to the next round's first step {to_step:.1f} s")
    live = [i for i in second if i != host1]
    took = job.wait_exit(live, 240)
    job.wait_exit([0], 60)
    assert job.procs[0].returncode not in (None, 0), said(job)
    assert "torchrun_jsc: this node did not run for" in job.output(0), said(job)
    every_node_exited(job, live, 0)
    runs = assert_resumed_and_completed(job, live, 3)
    assert min(r.resumed_from for r in runs.values()) >= resumed, f"{runs}\n{said(job)}"
    line = (
        f"restart 2 of 3: the rendezvous host {cluster.ib_ip(host1)}:29500 lost; going on with 3"
        f" nodes, node rank {host2} at {cluster.ib_ip(host2)}:29500 hosting the rendezvous"
    )
    assert all(line in job.output(i) for i in live), said(job)
    assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
    assert job.wait_gone(list(range(5)), 20) == {}, said(job)
    print(f"failover: every live node ended {took:.0f} s after the kill")
    # the event log: one writer at a time, each host after the one before (the thawed node0
    # writes nothing more), each handover logged by the next host
    events = events_of(cluster, "failover")
    writers = [e.node for e in events]
    assert list(dict.fromkeys(writers)) == ["node0", f"node{host1}", f"node{host2}"], said(job)
    assert writers == sorted(writers, key=lambda w: [0, host1, host2].index(int(w[4:])))
    assert [e.event for e in events] == [
        *("launch", "round"),
        *("launch", "handover", "round"),
        *("launch", "handover", "round", "end"),
    ], said(job)
    handovers = [e for e in events if e.event == "handover"]
    assert [(e.get("restart"), e.get("lost_nodes")) for e in handovers] == [
        (1, [0]),
        (2, [0, host1]),
    ]
    assert [e.get("restart") for e in events if e.event == "round"] == [0, 1, 2]
    summary = [ln for ln in job.output(host2).splitlines() if "torchrun_jsc: summary:" in ln]
    assert len(summary) == 1 and "3 rounds, 2 restarts;" in summary[0], said(job)
    assert "lost 2 rendezvous hosts: 2 handovers" in summary[0], said(job)


@pytest.mark.slow(reason="per release: TRJSC_SLOW_SCENARIOS=1 (scripts/torch-matrix sets it)")
def test_a_spare_takes_the_place_of_a_node_cut_off_from_its_peers(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=4 on 5 nodes, a training node's IB link down (it still has its management
    network): the spare takes its place, training resumes and completes on 4 nodes, every live
    node exits 0; the cut-off node ends on its own within its bound (its store stopped
    answering: it hands over to the next node, which it cannot reach either). (Per release in
    the matrix.)"""
    cluster = five_cluster
    job, spare, first = with_a_spare(cluster, job_cleanup, "cut")
    job.wait_for("TRJSC_TRAINING", nodes=first)
    cut = max(i for i in first if i != 0)
    live = sorted(set(range(5)) - {cut})
    wait_for_step(job, 0, 12)
    cluster.link_down(cut)
    cut_at = time.monotonic()
    try:
        to_step = first_step_after(job, spare, 0, TO_FIRST_STEP + 30)
        took = job.wait_exit(live, 240)
        every_node_exited(job, live, 0)
        assert_resumed_and_completed(job, live, 4)
        # the cut-off node takes its host for lost and hands over to the next node, which it
        # cannot reach either: it ends once that node's time to serve is over
        bound = (
            PEER_TIMEOUT + Config(peer_timeout=PEER_TIMEOUT, grace=TERM_GRACE).failover_wait + 30
        )
        job.wait_exit([cut], max(cut_at + bound - time.monotonic(), 1.0))
        assert job.procs[cut].returncode not in (None, 0), said(job)
        assert "has not answered for" in job.output(cut), said(job)
        assert "cannot go on: the next rendezvous host" in job.output(cut), said(job)
        assert to_step < TO_FIRST_STEP, f"{to_step:.0f} s\n{said(job)}"
        print(f"cut off: the cut to the new round's first step {to_step:.1f} s; {took:.0f} s")
    finally:
        cluster.link_up(cut)


@pytest.mark.slow(reason="per release: TRJSC_SLOW_SCENARIOS=1 (scripts/torch-matrix sets it)")
def test_a_spare_that_is_not_needed_ends_with_the_job(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=4 on 5 nodes and no fault but a rendezvous host that joins the first round 8 s
    after the others: it is in the round all the same, the four train to the end, the spare
    says it was not needed and every node, the spare included, exits 0 (torch closes the
    rendezvous at the end; on 2.3+ a spare in its redundancy list would otherwise end with an
    error). (Per release in the matrix.)"""
    job, spare, _ = with_a_spare(five_cluster, job_cleanup, "unneeded", host_late=8.0)
    took = job.wait_exit(list(range(5)), 240)
    every_node_exited(job, range(5), 0)
    line = "torchrun_jsc: spare: the job completed without needing this node"
    assert line in job.output(spare), said(job)
    assert "TRJSC_RESUMED" not in job.output(spare), said(job)
    assert "restart 1 of" not in "".join(job.output(i) for i in range(5)), said(job)
    print(f"unneeded spare: every node ended {took:.0f} s after the start")


def test_no_false_alarm_with_a_spare_on_a_fully_loaded_machine(
    five_cluster: Cluster, job_cleanup: List[Job]
) -> None:
    """--nnodes=4 --max_restarts=3 on 5 nodes at the smallest peer timeout, four busy loops on
    the machine's two cores for the whole job (about a minute of training): no node or spare is
    declared lost, nothing restarts, every step is right, the spare is not needed, every node
    exits 0. (Runs alone in CI, after the other scenarios, as the other full-load one.)"""
    hogs = busy(4)
    try:
        job = Job(
            five_cluster,
            command(five_cluster, "4", 3),
            [{**env, "TRJSC_STEPS": "240"} for env in envs(five_cluster, 5, "loaded")],
        )
        job_cleanup.append(job)
        job.wait_exit(list(range(5)), 480)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    every_node_exited(job, range(5), 0)
    text = "".join(job.output(i) for i in range(5))
    for alarm in ("has not been heard from", "has not answered", "restart 1 of", "did not run"):
        assert alarm not in text, f"{alarm!r}\n{said(job)}"
    spare = [i for i in range(5) if "torchrun_jsc: spare: the job's" in job.output(i)]
    assert len(spare) == 1, said(job)
    assert "the job completed without needing this node" in job.output(spare[0]), said(job)
    trained = [i for i in range(5) if i != spare[0]]
    runs = {i: last_run(job.output(i)) for i in trained}
    for i, run in runs.items():
        assert run.world == 4 and run.resumed_from == 0, f"node{i}: {run}\n{said(job)}"
        assert set(run.steps) == set(range(1, 241)) and all(run.steps.values()), said(job)
        assert run.done_ok, f"node{i}: {run}\n{said(job)}"
