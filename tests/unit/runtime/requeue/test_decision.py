"""The requeue's pure decisions: the loop guard, the excluded nodes, the scontrol commands,
what Slurm's answers mean, and the lines every node prints."""

from __future__ import annotations

from typing import List, Sequence

import pytest

from torchrun_jsc.runtime.records.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.requeue.decision import (
    LOST_NODE,
    SCRIPT,
    WARNING,
    Budget,
    JobFacts,
    cause_of,
    commands,
    done_line,
    excluded,
    job_facts,
    lost_names,
    no_line,
    nodes_gone,
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
        (0, 3, 42.4, 600.0, False, "the training script failed after 42 s, less than"),
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
    if "failed after" in why:
        assert "TORCHRUN_JSC_REQUEUE_MIN_RUN=600 s" in found.why_not


WORKER_3 = Record(kind=FAILED, hostname="node2", node_rank=2, time=5.0, exitcode=3)
WORKER_99 = WORKER_3._replace(exitcode=99)
LOST_3 = Record(kind=LOST, hostname="node3", node_rank=3, time=4.0)
STOPPED_1 = Record(kind=STOPPED, hostname="node1", node_rank=1, time=6.0)


@pytest.mark.parametrize(
    "records, cause",
    [
        ([WORKER_3, STOPPED_1], SCRIPT),
        ([LOST_3, WORKER_3, STOPPED_1], LOST_NODE),  # the loss came first: the rest followed
        ([WORKER_3._replace(time=3.0), LOST_3], SCRIPT),
        ([Record(kind=LOST, hostname="n2", what="the rendezvous host n0i:1")], LOST_NODE),
        ([STOPPED_1], SCRIPT),
        ([], SCRIPT),
    ],
)
def test_a_failure_is_judged_by_its_first_cause(records: List[Record], cause: str) -> None:
    assert cause_of(records) == cause


@pytest.mark.parametrize(
    "cause, ran, records, done, requeue, why",
    [
        # Slurm's warning: whatever the run's length, but not in the run's first minute
        (WARNING, 31.0 * 60, (), 0, True, ""),
        (WARNING, 61.0, (), 0, True, ""),
        (WARNING, 59.0, (), 0, False, "Slurm's warning (SIGUSR1) came 59 s into the run:"),
        (WARNING, 3600.0, (), 3, False, "3 of 3 requeues done"),
        # a lost node: whatever the run's length
        (LOST_NODE, 31.0, (LOST_3,), 0, True, ""),
        (LOST_NODE, 1.0, (LOST_3,), 0, True, ""),
        (LOST_NODE, 9000.0, (LOST_3,), 3, False, "3 of 3 requeues done"),
        # the script itself: after the minimum run, never with the stop code
        (SCRIPT, 601.0, (WORKER_3,), 0, True, ""),
        (SCRIPT, 31.0, (WORKER_3,), 0, False, "the training script failed after 31 s"),
        (SCRIPT, 9000.0, (WORKER_99,), 0, False, "the training script exited with code 99"),
        (SCRIPT, 9000.0, (WORKER_99, STOPPED_1), 0, False, "(TORCHRUN_JSC_REQUEUE_STOP_CODE)"),
    ],
)
def test_the_requeue_judges_by_cause(
    cause: str, ran: float, records: Sequence[Record], done: int, requeue: bool, why: str
) -> None:
    found = verdict(B._replace(done=done), ran, cause, records)
    assert found.requeue is requeue
    assert (why in found.why_not) if why else found.why_not == ""


@pytest.mark.parametrize(
    "min_run, ran, requeue", [(0.0, 5.0, True), (30.0, 29.0, False), (30.0, 31.0, True)]
)
def test_the_early_warning_window_is_at_most_the_minimum_run(
    min_run: float, ran: float, requeue: bool
) -> None:
    assert verdict(B._replace(min_run=min_run), ran, WARNING).requeue is requeue


def test_the_stop_code_is_the_setting_and_none_switches_it_off() -> None:
    assert not verdict(B._replace(stop_code=3), 9000.0, SCRIPT, (WORKER_3,)).requeue
    assert verdict(B._replace(stop_code=None), 9000.0, SCRIPT, (WORKER_99,)).requeue


SHOW_NODES = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1\n"
    "NodeName=node2 Arch=x86_64 CoresPerSocket=1 State=DOWN* ThreadsPerCore=1\n"
    "NodeName=node3 Arch=x86_64 CoresPerSocket=1 State=ALLOCATED* ThreadsPerCore=1\n"
    "NodeName=node4 Arch=x86_64 CoresPerSocket=1 State=MIXED+NOT_RESPONDING Reason=x\n"
    "NodeName=node5 Arch=x86_64 CoresPerSocket=1 State=ALLOCATED ThreadsPerCore=1\n"
)


@pytest.mark.parametrize(
    "names, gone",
    [
        (["node2"], True),
        (["node2", "node3", "node4.cluster"], True),
        (["node2", "node5"], False),  # node5 answers Slurm: it may be training on
        (["node1"], False),
        (["node9"], False),  # not in the answer: nothing confirmed
        ([], False),
    ],
)
def test_a_minority_requeues_only_when_slurm_says_the_lost_nodes_are_gone(
    names: List[str], gone: bool
) -> None:
    assert nodes_gone(SHOW_NODES, names) is gone


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
    from torchrun_jsc.runtime.requeue.decision import (
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
