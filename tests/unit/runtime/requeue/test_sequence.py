"""The requeue's sequence on one node, with the fake store and a fake ``scontrol``: who
requeues, what it runs, what every node says, and that torch's monitor is held only while a
requeue is pending. No network, no Slurm."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pytest

from tests.unit.fakestore import FakeStore
from torchrun_jsc.runtime import timing
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.records.report import LOST, Record
from torchrun_jsc.runtime.requeue import sequence as requeuing
from torchrun_jsc.runtime.requeue.decision import Budget
from torchrun_jsc.runtime.signals.signalled import Stops
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import Event
from torchrun_jsc.runtime.watch.vocabulary import Requeuing as RequeuingEvent

B = Budget(job="12", done=0, most=3, min_run=0.0, grace=1.0, signal="SIGUSR1")
SHOW = "JobId=12 JobState=RUNNING Requeue=1 BatchFlag=1 ExcNodeList=(null)"


class FakeJob:
    def __init__(self, serving: bool, members: int, protocol: Optional[JobProtocol]) -> None:
        self._serving = serving
        self._members = [f"m{i}" for i in range(members)]
        self._protocol = protocol
        self.events: List[Event] = []
        #: What went to the event log.
        self.notes: List[Tuple[str, Dict[str, Any]]] = []
        self.workers = Workers()  # none registered
        self.stops = Stops()

    @property
    def protocol(self) -> Optional[JobProtocol]:
        return self._protocol

    @property
    def members(self) -> List[str]:
        return self._members

    @property
    def serving(self) -> bool:
        return self._serving

    def post(self, event: Event) -> None:
        self.events.append(event)

    def note(self, event: str, fields: Mapping[str, Any]) -> None:
        self.notes.append((event, dict(fields)))


class Slurm:
    """A fake ``scontrol``: every command run, and an answer per verb (``show`` of a job,
    ``node`` for ``show node``)."""

    def __init__(self, answers: Optional[Dict[str, Tuple[int, str]]] = None) -> None:
        self.ran: List[Tuple[str, ...]] = []
        self.answers = {"show": (0, SHOW), **(answers or {})}

    def __call__(self, command: Sequence[str]) -> Tuple[int, str]:
        self.ran.append(tuple(command))
        verb = command[2] if command[1] == "-o" else command[1]
        if verb == "show" and command[3] == "node":
            verb = "node"
        return self.answers.get(verb, (0, ""))


class Ends:
    def __init__(self) -> None:
        self.codes: List[int] = []
        self.done = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.done.set()


def make(
    serving: bool, members: int = 1, slurm: Optional[Slurm] = None, budget: Budget = B
) -> Tuple[requeuing.Requeuing, FakeJob, Slurm, Ends, JobProtocol]:
    protocol = JobProtocol(FakeStore())
    job, slurm, ends = FakeJob(serving, members, protocol), slurm or Slurm(), Ends()
    requeue = requeuing.Requeuing(budget, job, grace=0.0, run=slurm, end=ends)
    requeue.started -= 61.0  # past the first minute, in which Slurm's warning is refused
    return (
        requeue,
        job,
        slurm,
        ends,
        protocol,
    )


def test_the_serving_node_requeues_once_every_member_is_ready(
    capsys: pytest.CaptureFixture[str],
) -> None:
    requeue, job, slurm, ends, protocol = make(serving=True, members=2)
    requeue.signalled()
    requeue.signalled()  # a second signal changes nothing
    time.sleep(0.6)
    assert slurm.ran == [("scontrol", "-o", "show", "job", "12")]  # waits for the other member
    protocol.requeue_ready()
    protocol.requeue_told()  # the other node read the outcome: no linger
    assert ends.done.wait(10)
    assert slurm.ran[1:] == [("scontrol", "-o", "show", "job", "12"), ("scontrol", "requeue", "12")]
    assert ends.codes == [0]
    line = (
        "torchrun_jsc: requeue 1 of 3: job 12 requeued after SIGUSR1 (Slurm's warning before"
        " the time limit); its next run resumes from the checkpoint"
    )
    assert protocol.requeue_outcome() == (True, line)
    assert protocol.requeue_verdict() == (True, "")
    err = capsys.readouterr().err
    assert err.count(line) == 1 and "the workers have 1 s to save a checkpoint" in err
    assert RequeuingEvent() in job.events
    assert job.stops.held()
    assert job.notes == [
        (
            "requeue",
            {
                "cause": "SIGUSR1 (Slurm's warning before the time limit)",
                "excluded": [],
                "done": True,
                "line": line.removeprefix("torchrun_jsc: "),
            },
        )
    ]


def test_another_node_follows_the_serving_nodes_word(capsys: pytest.CaptureFixture[str]) -> None:
    requeue, _, slurm, ends, protocol = make(serving=False, members=2)
    protocol.set_requeue_verdict(True, "")
    protocol.set_requeue_outcome(True, "torchrun_jsc: requeue 1 of 3: done elsewhere")
    requeue.signalled()
    assert ends.done.wait(10)
    assert slurm.ran == []  # only the serving node speaks to Slurm
    assert ends.codes == [0]
    assert protocol.requeue_readies() == 1 and protocol.requeue_told(0) == 1
    assert capsys.readouterr().err.count("requeue 1 of 3: done elsewhere") == 1


def test_the_guard_says_no_and_torchs_monitor_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    requeue, job, slurm, ends, _ = make(serving=True, budget=B._replace(done=3))
    requeue.signalled()
    started = time.monotonic()
    requeue.park()  # released once the guard said no
    assert time.monotonic() - started < 5
    assert requeue.released.is_set() and ends.codes == [] and slurm.ran == []
    assert "torchrun_jsc: no requeue: 3 of 3 requeues done" in capsys.readouterr().err
    assert not job.stops.held()


def test_a_job_that_is_not_requeueable_is_said_by_every_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    slurm = Slurm({"show": (0, "JobId=12 Requeue=0 BatchFlag=1")})
    requeue, _, _, ends, protocol = make(serving=True, slurm=slurm)
    requeue.signalled()
    requeue.park()
    assert ends.codes == [] and slurm.ran == [("scontrol", "-o", "show", "job", "12")]
    no = "torchrun_jsc: no requeue: the job is not requeueable: submit it with sbatch --requeue"
    assert capsys.readouterr().err.strip() == no
    other, _, _, other_ends, _ = make(serving=False)
    other.job = FakeJob(False, 1, protocol)  # the same store: it reads the verdict
    other.signalled()
    other.park()
    assert other_ends.codes == [] and capsys.readouterr().err.strip() == no


def test_park_waits_only_while_a_requeue_is_pending() -> None:
    requeue, *_ = make(serving=True)
    started = time.monotonic()
    requeue.park()
    assert time.monotonic() - started < 0.1
    assert requeue.bound() == pytest.approx(
        timing.REQUEUE_VERDICT_WAIT
        + B.grace
        + timing.REQUEUE_READY_WAIT
        + timing.REQUEUE_OUTCOME_WAIT
    )


def test_after_a_failure_the_lost_nodes_are_excluded_before_the_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    slurm = Slurm({"show": (0, "JobId=12 Requeue=1 BatchFlag=1 ExcNodeList=node7")})
    requeue, job, _, ends, protocol = make(serving=True, members=4, slurm=slurm)
    protocol.requeue_told(2)  # the two live others read it
    records = [Record(kind=LOST, hostname="node3", node_rank=3)]
    requeue.after_failure(records)
    requeue.after_failure(records)  # once
    assert slurm.ran == [
        ("scontrol", "-o", "show", "job", "12"),
        ("scontrol", "requeuehold", "12"),
        ("scontrol", "update", "JobId=12", "ExcNodeList=node7,node3"),
        ("scontrol", "release", "12"),
    ]
    line = (
        "torchrun_jsc: requeue 1 of 3: job 12 requeued after a failure it could not recover"
        " from, without node3; its next run resumes from the checkpoint"
    )
    assert capsys.readouterr().err.strip() == line
    assert protocol.requeue_outcome() == (True, line) and ends.codes == []
    assert [(e, f["excluded"], f["done"]) for e, f in job.notes] == [("requeue", ["node3"], True)]


def test_after_a_handover_the_hosts_lost_before_are_excluded_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The store moved with the handover: the plan named the lost host's node (node0); the
    members lost in this round are counted as readers no more, the host lost before never."""
    requeue, _, slurm, _, protocol = make(
        serving=True, members=4, budget=B._replace(lost_before=("node0",))
    )
    protocol.requeue_told(2)  # the two live others read it
    requeue.after_failure([Record(kind=LOST, hostname="node3", node_rank=3)])
    assert ("scontrol", "update", "JobId=12", "ExcNodeList=node0,node3") in slurm.ran
    assert "could not recover from, without node0, node3; its next run" in capsys.readouterr().err
    assert protocol.requeue_outcome() is not None


def test_a_stand_in_after_a_handover_excludes_every_lost_host(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(requeuing, "stand_in_delay", lambda budget: 0.0)
    budget = B._replace(node_rank=2, host="node1", lost_before=("node0",))
    requeue, _, slurm, _, protocol = make(serving=False, budget=budget)
    protocol.store.running.clear()  # type: ignore[attr-defined]  # the host is frozen
    requeue.after_failure(HOST_LOST)
    assert ("scontrol", "update", "JobId=12", "ExcNodeList=node0,node1") in slurm.ran
    assert "(the rendezvous host lost), without node0, node1;" in capsys.readouterr().err
    protocol.store.running.set()  # type: ignore[attr-defined]


def test_the_nodes_that_left_earlier_rounds_are_excluded_with_those_lost_now(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """node2 was lost earlier and a spare took its place (no record: the job went on); node3
    is lost now: both stay out of the next run, each once."""
    requeue, _, slurm, _, protocol = make(serving=True, members=4)
    protocol.requeue_told(2)
    lost_now = [Record(kind=LOST, hostname="node3", node_rank=3)]
    requeue.after_failure(lost_now, ["node2", "node3"])
    assert ("scontrol", "update", "JobId=12", "ExcNodeList=node2,node3") in slurm.ran
    assert "could not recover from, without node2, node3; its next" in capsys.readouterr().err


def test_a_stand_in_excludes_the_nodes_that_left_earlier_rounds_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(requeuing, "stand_in_delay", lambda budget: 0.0)
    budget = B._replace(node_rank=1, host="node0")
    requeue, _, slurm, _, protocol = make(serving=False, budget=budget)
    protocol.store.running.clear()  # type: ignore[attr-defined]  # the host is frozen
    requeue.after_failure(HOST_LOST, ["node4"])
    assert ("scontrol", "update", "JobId=12", "ExcNodeList=node4,node0") in slurm.ran
    assert "(the rendezvous host lost), without node4, node0;" in capsys.readouterr().err
    protocol.store.running.set()  # type: ignore[attr-defined]


def test_a_refused_step_stops_the_sequence_and_says_why() -> None:
    slurm = Slurm({"update": (1, "Invalid node name specified")})
    requeue, _, _, _, protocol = make(serving=True, slurm=slurm)
    protocol.requeue_told(5)
    requeue.after_failure([Record(kind=LOST, hostname="node3", node_rank=3)])
    assert [c[1] for c in slurm.ran] == ["-o", "requeuehold", "update"]
    found = protocol.requeue_outcome()
    assert found is not None and found[0] is False
    assert "Slurm refused it (scontrol update JobId=12 ExcNodeList=node3: Invalid node" in found[1]


def test_a_lost_node_requeues_whatever_the_runs_length(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The minimum run guards against a script that fails at once, not against a lost node."""
    requeue, _, slurm, _, _ = make(serving=True, members=4, budget=B._replace(min_run=600.0))
    requeue.after_failure([Record(kind=LOST, hostname="node3", node_rank=3, time=1.0)])
    assert ("scontrol", "release", "12") in slurm.ran
    assert "requeued after a failure it could not recover from, without node3" in (
        capsys.readouterr().err
    )


NODES_DOWN = "NodeName=node2 State=DOWN*\nNodeName=node3 State=IDLE*\n"
NODES_UP = "NodeName=node2 State=DOWN*\nNodeName=node3 State=ALLOCATED\n"


@pytest.mark.parametrize(("nodes", "requeued"), [(NODES_UP, False), (NODES_DOWN, True)])
def test_a_group_too_small_to_go_on_requeues_only_when_slurm_says_the_others_are_gone(
    capsys: pytest.CaptureFixture[str], nodes: str, requeued: bool
) -> None:
    slurm = Slurm({"node": (0, nodes)})
    requeue, _, slurm, _, _ = make(serving=True, members=3, slurm=slurm)
    lost = [Record(kind=LOST, hostname=f"node{i}", node_rank=i, time=1.0) for i in (2, 3)]
    requeue.after_failure(lost, minority=True)
    assert slurm.ran[0] == ("scontrol", "-o", "show", "node", "node2,node3")
    said = capsys.readouterr().err
    if requeued:
        assert ("scontrol", "update", "JobId=12", "ExcNodeList=node2,node3") in slurm.ran
        assert "without node2, node3" in said
    else:
        assert slurm.ran == [("scontrol", "-o", "show", "node", "node2,node3")]
        assert said.strip() == (
            "torchrun_jsc: no requeue: this node's group was too small to go on, and Slurm does"
            " not say that the lost nodes are down: they may be training on without it"
        )


def test_another_node_after_a_failure_prints_the_outcome_or_says_it_heard_none(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    requeue, _, slurm, _, protocol = make(serving=False)
    protocol.set_requeue_outcome(True, "torchrun_jsc: requeue 1 of 3: job 12 requeued")
    requeue.after_failure([])
    assert slurm.ran == [] and protocol.requeue_told(0) == 1
    assert capsys.readouterr().err.strip() == "torchrun_jsc: requeue 1 of 3: job 12 requeued"
    monkeypatch.setattr(timing, "REQUEUE_OUTCOME_WAIT", 0.3)
    silent, *_ = make(serving=False)
    silent.after_failure([])
    assert "no requeue: the rendezvous host, which requeues the job, did not say" in (
        capsys.readouterr().err
    )


def test_a_second_caller_waits_for_the_first_to_have_said_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    requeue, _, _, _, protocol = make(serving=False)
    first = threading.Thread(target=requeue.after_failure, args=([],))
    first.start()
    time.sleep(0.3)
    threading.Timer(0.3, lambda: protocol.set_requeue_outcome(True, "the outcome")).start()
    requeue.after_failure([])  # returns only once the first has printed
    assert "the outcome" in capsys.readouterr().err
    first.join(5)


def test_the_guard_after_a_failure_is_said_on_every_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for serving in (True, False):
        requeue, _, slurm, _, _ = make(serving, budget=B._replace(min_run=3600.0))
        requeue.after_failure([])
        assert slurm.ran == []
        said = capsys.readouterr().err
        assert "no requeue: the training script failed after 61 s, less than" in said


HOST_LOST = [Record(kind=LOST, hostname="node2", node_rank=2, what="the rendezvous host n0i:1")]


def test_a_lost_host_is_stood_in_for_by_node_rank_1_without_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    budget = B._replace(node_rank=1, host="node0")
    requeue, _, slurm, _, protocol = make(serving=False, budget=budget)
    protocol.store.running.clear()  # type: ignore[attr-defined]  # the host is frozen
    started = time.monotonic()
    requeue.after_failure(HOST_LOST)
    assert time.monotonic() - started < 5  # neither the store nor a turn is waited for
    assert slurm.ran == [
        ("scontrol", "-o", "show", "job", "12"),
        ("scontrol", "requeuehold", "12"),
        ("scontrol", "update", "JobId=12", "ExcNodeList=node0"),
        ("scontrol", "release", "12"),
    ]
    assert "requeued after a failure it could not recover from (the rendezvous host lost)," in (
        capsys.readouterr().err
    )
    protocol.store.running.set()  # type: ignore[attr-defined]


def test_a_later_stand_in_sees_the_requeue_done_and_others_only_say_who(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    other, _, other_slurm, _, _ = make(serving=False, budget=B._replace(node_rank=7))
    other.after_failure(HOST_LOST)
    assert other_slurm.ran == []
    assert "node ranks 1-3 requeue it in its place" in capsys.readouterr().err
    monkeypatch.setattr(requeuing, "stand_in_delay", lambda budget: 0.0)  # its turn at once
    slurm = Slurm({"show": (0, "JobId=12 Requeue=1 BatchFlag=1 Restarts=1")})
    requeue, *_ = make(serving=False, slurm=slurm, budget=B._replace(node_rank=2, host="n0"))
    requeue.after_failure(HOST_LOST)
    assert slurm.ran == [("scontrol", "-o", "show", "job", "12")]
    assert "requeue 1 of 3: job 12 was requeued already (by another node)" in (
        capsys.readouterr().err
    )


def test_a_thawed_host_does_not_requeue_the_jobs_next_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Frozen, then thawed after a stand-in requeued (or after the others went on with a next
    host): what it lost meanwhile (every peer, in its eyes) says nothing of them; it does not
    ask Slurm, let alone requeue without them."""
    requeue, _, slurm, _, protocol = make(serving=True, members=4)
    protocol.requeue_told(5)
    records = [
        Record(kind=LOST, hostname="node0", node_rank=0, what="this node, node0 (node rank 0),"),
        Record(kind=LOST, hostname="node1", node_rank=1),
    ]
    requeue.after_failure(records)
    assert slurm.ran == []
    assert capsys.readouterr().err.strip() == (
        "torchrun_jsc: no requeue: this node itself did not run for the peer timeout (frozen or"
        " suspended): the other nodes requeue the job or went on without it"
    )


def test_a_requeue_already_counted_by_slurm_is_not_done_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    slurm = Slurm({"show": (0, "JobId=12 JobState=RUNNING Requeue=1 BatchFlag=1 Restarts=1")})
    requeue, _, _, _, protocol = make(serving=True, slurm=slurm)
    protocol.requeue_told(5)
    requeue.after_failure([Record(kind=LOST, hostname="node3", node_rank=3)])
    assert slurm.ran == [("scontrol", "-o", "show", "job", "12")]
    assert "job 12 was requeued already (by another node)" in capsys.readouterr().err
