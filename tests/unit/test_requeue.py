"""The requeue's pure decisions: the loop guard, the excluded nodes, the scontrol commands,
what Slurm's answers mean, and the lines every node prints."""

from __future__ import annotations

from typing import List, Sequence

import pytest

from torchrun_jsc.runtime.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.requeue import (
    Budget,
    JobFacts,
    commands,
    done_line,
    excluded,
    job_facts,
    lost_names,
    no_line,
    refusal,
    verdict,
)

B = Budget(job="12", done=0, most=3, min_run=600.0, grace=120.0, signal="SIGUSR1")


@pytest.mark.parametrize(
    "done, most, ran, min_run, requeue, why",
    [
        (0, 3, 601.0, 600.0, True, ""),
        (0, 3, 600.0, 600.0, True, ""),  # the minimum itself is enough
        (2, 3, 9000.0, 600.0, True, ""),
        (3, 3, 9000.0, 600.0, False, "3 of 3 requeues done (TORCHRUN_JSC_REQUEUE_MAX=3)"),
        (5, 3, 9000.0, 600.0, False, "5 of 3 requeues done"),  # lowered between runs
        (0, 0, 9000.0, 600.0, False, "0 of 0 requeues done (TORCHRUN_JSC_REQUEUE_MAX=0)"),
        (0, 3, 42.4, 600.0, False, "this run trained for 42 s, less than"),
        (0, 3, 0.0, 0.0, True, ""),
        (3, 3, 1.0, 600.0, False, "3 of 3 requeues done"),  # the count is said first
    ],
)
def test_the_loop_guard(
    done: int, most: int, ran: float, min_run: float, requeue: bool, why: str
) -> None:
    found = verdict(B._replace(done=done, most=most, min_run=min_run), ran)
    assert found.requeue is requeue
    assert found.why_not.startswith(why) if why else found.why_not == ""
    if "trained" in why:
        assert "TORCHRUN_JSC_REQUEUE_MIN_RUN=600 s" in found.why_not


@pytest.mark.parametrize(
    "current, lost, result",
    [
        ("(null)", ["node3"], "node3"),
        ("", ["node3"], "node3"),
        ("(null)", [], ""),
        ("node1", ["node3"], "node1,node3"),
        ("node1", ["node1"], "node1"),
        ("node1,node3", ["node3", "node4"], "node1,node3,node4"),
        ("(null)", ["jwb0001.juwels", "jwb0001"], "jwb0001"),  # hostname → Slurm name, once
        ("node[1-2]", ["node3"], "node[1-2],node3"),
        ("node[1-2],node7", ["node7"], "node[1-2],node7"),
        ("node[1-2]", ["node2"], "node[1-2],node2"),  # inside a range: Slurm's to merge
    ],
)
def test_the_nodes_the_next_run_excludes(current: str, lost: Sequence[str], result: str) -> None:
    assert excluded(current, lost) == result


def test_without_nodes_to_exclude_one_requeue_else_held_updated_released() -> None:
    assert commands("12", "") == (("scontrol", "requeue", "12"),)
    assert commands("12", "node3,node4") == (
        ("scontrol", "requeuehold", "12"),
        ("scontrol", "update", "JobId=12", "ExcNodeList=node3,node4"),
        ("scontrol", "release", "12"),
    )


def test_what_scontrol_show_job_says() -> None:
    text = (
        "JobId=12 JobName=train JobState=RUNNING Requeue=1 Restarts=0 BatchFlag=1"
        " ReqNodeList=(null) ExcNodeList=node[3-4] NodeList=node[0-2,5]"
    )
    assert job_facts(text) == JobFacts(True, "node[3-4]", True, 0)
    assert job_facts("JobId=12 Requeue=0 BatchFlag=0") == JobFacts(False, "(null)", False)
    assert job_facts("") == JobFacts(None, "(null)", None)


@pytest.mark.parametrize(
    "facts, command, error, says",
    [
        (JobFacts(True, "", False), (), "", "not a batch job (salloc or srun alone)"),
        (JobFacts(False, "", True), (), "", "not requeueable: submit it with sbatch --requeue"),
        (
            JobFacts(True, "", True),
            ("scontrol", "requeue", "12"),
            "Access/permission denied for job 12\n",
            "Slurm refused it (scontrol requeue 12: Access/permission denied for job 12); check",
        ),
        (None, ("scontrol", "release", "12"), "", "(scontrol release 12: no answer)"),
    ],
)
def test_refusals_name_the_reason_and_the_fix(
    facts: JobFacts, command: Sequence[str], error: str, says: str
) -> None:
    line = refusal(facts, command, error)
    assert says in line
    assert "\n" not in line


def test_only_nodes_the_watch_declared_lost_are_excluded() -> None:
    records: List[Record] = [
        Record(kind=FAILED, hostname="node1", node_rank=1),
        Record(kind=LOST, hostname="node3.cluster", node_rank=3),
        Record(kind=STOPPED, hostname="node2", node_rank=2),
        Record(kind=LOST, hostname="node3", node_rank=3),
        # what a node lost itself (its host, its own run) names no other node
        Record(kind=LOST, hostname="node0", node_rank=0, what="the rendezvous host node4i:29500"),
        Record(kind=LOST, hostname="node5", node_rank=5),
    ]
    assert lost_names(records) == ["node3", "node5"]


def test_the_lines() -> None:
    assert done_line(B._replace(done=1), "SIGUSR1 (x)", ()) == (
        "torchrun_jsc: requeue 2 of 3: job 12 requeued after SIGUSR1 (x); its next run resumes"
        " from the checkpoint"
    )
    assert ", without node3, node4;" in done_line(B, "a failure", ["node3", "node4"])
    assert no_line("why") == "torchrun_jsc: no requeue: why"


def test_the_stand_ins_for_a_lost_host_take_turns() -> None:
    from torchrun_jsc.runtime.requeue import (
        STAND_IN_STEP,
        host_lost,
        requeued_already,
        stand_in_delay,
    )

    assert [stand_in_delay(B._replace(node_rank=r)) for r in (0, 1, 2, 3, 4, None)] == [
        None,
        0.0,
        STAND_IN_STEP,
        2 * STAND_IN_STEP,
        None,
        None,
    ]
    assert host_lost([Record(kind=LOST, hostname="n1", what="the rendezvous host n0i:1")])
    assert not host_lost([Record(kind=LOST, hostname="n3"), Record(kind=FAILED, hostname="n1")])
    assert requeued_already(B, job_facts("JobId=12 Restarts=1"))
    assert not requeued_already(B._replace(done=1), job_facts("JobId=12 Restarts=1"))
    assert not requeued_already(B, None)
