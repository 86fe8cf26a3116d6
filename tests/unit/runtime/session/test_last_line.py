"""The job watch's session and the last line: one caller prints it, the others wait for it; the
records it is made of, read and published through the fake store."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

from tests.unit.fakestore import FakeStore
from tests.unit.sessions import err_lines, new_session, rec, with_store
from torchrun_jsc.runtime import timing
from torchrun_jsc.runtime.records import report
from torchrun_jsc.runtime.records.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.session.ledger import LastLine, Ledger
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import Phase, State

# --------------------------------------------------------------------------- the last line


def _failed_session(node_rank: int = 0) -> Session:
    session = new_session(node_rank=node_rank)
    session.state = State(Phase.STOPPING, failed=True)
    session.ledger.records.append(
        rec(FAILED, "node2", 0, node_rank=2, rank=2, local_rank=0, exitcode=3, ranks_ended=1)
    )
    return session


def test_a_second_caller_waits_for_the_last_line_instead_of_cutting_it_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stopping thread and the process's end both try to print the last line: whichever
    comes second returns only once the line is out (before, it returned at once and the
    stopping thread ended the process while the host was still reading the records)."""
    session = _failed_session()
    read = threading.Event()

    def slow_read(*args: Any) -> List[Record]:
        read.set()
        time.sleep(0.5)
        return list(session.ledger.records)

    with_store(session)
    monkeypatch.setattr(session.ledger, "read_all", slow_read)
    printer = threading.Thread(target=session.print_last_line)
    printer.start()
    assert read.wait(5)
    session.print_last_line()
    lines = err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("torchrun_jsc: first failure: node2")
    printer.join(5)
    assert err_lines(capsys) == []


@pytest.mark.parametrize("exiting", [False, True])
def test_the_stopping_thread_ends_the_process_only_if_the_agent_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exiting: bool
) -> None:
    session = _failed_session()
    monkeypatch.setattr(session.ledger, "read_all", lambda *a: [])
    if exiting:  # the process's end began, and printed the line
        session.state = session.state._replace(exiting=True)
        session.print_last_line()
        capsys.readouterr()
    exits: List[int] = []
    monkeypatch.setattr(timing, "EXIT_GRACE", 0.0)
    monkeypatch.setattr(session.workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr("os._exit", exits.append)
    session.ending.end_workers()
    assert exits == ([] if exiting else [1])
    printed = "first failure: node2" in capsys.readouterr().err
    assert printed is not exiting


@pytest.mark.parametrize("busy_for, found", [(0.0, 2), (0.3, 2), (30.0, 0)])
def test_reading_the_records_gives_up_only_on_a_hanging_operation(
    busy_for: float, found: int
) -> None:
    """Another thread's heartbeat in flight is no reason to skip the other nodes' records (the
    report then lacked the count of ranks stopped after the failure); one stuck for long is."""
    store = FakeStore()
    protocol = JobProtocol(store)
    protocol.write_record(rec(FAILED, "node2", 0, node_rank=2, rank=2, exitcode=3, ranks_ended=1))
    protocol.write_record(rec(STOPPED, "node1", 1, node_rank=1, ranks_ended=1))
    store.busy_for = busy_for
    ledger = Ledger(report=True, protocol=protocol)
    assert len(ledger.read_all(["a", "b"], serving=False, settle=0.0)) == found


@pytest.mark.parametrize("lost, waits", [([], True), (["c"], False)])
def test_the_store_host_waits_for_readers_but_not_for_a_lost_node(
    monkeypatch: pytest.MonkeyPatch, lost: List[str], waits: bool
) -> None:
    """At a failure the node serving the store lingers until every member has read the records;
    a node it declared lost never will, so it is not waited for (the job ended LINGER later)."""
    monkeypatch.setattr(timing, "LINGER", 1.0)
    protocol = JobProtocol(FakeStore())
    for name in ("node0", "node1", "node2"):
        protocol.write_record(rec(STOPPED, name, 1, ranks_ended=1))
    protocol.mark_read()  # node1 has read them
    ledger = Ledger(report=True, protocol=protocol)
    ledger.unread.extend(lost)
    started = time.monotonic()
    assert len(ledger.read_all(["a", "b", "c"], serving=True, settle=0.0)) == 3
    took = time.monotonic() - started
    assert (took >= 0.9) if waits else (took < 0.5), took


@pytest.mark.parametrize(
    "first, second, kept",
    [
        (STOPPED, STOPPED, STOPPED),  # the stopping thread and torch's monitor both saw the stop
        (STOPPED, FAILED, FAILED),  # a worker of its own had failed: that is the node's record
        (FAILED, STOPPED, FAILED),
    ],
)
def test_a_node_publishes_one_record(first: str, second: str, kept: str) -> None:
    """Before, the stopping thread and the monitor could each publish the same ended workers,
    and the report counted them twice ("5 ranks stopped after it" for 3)."""
    protocol = JobProtocol(FakeStore())
    ledger = Ledger(report=True, protocol=protocol)
    for kind in (first, second):
        ledger.publish_own(rec(kind, "node1", 0, node_rank=1, ranks_ended=1))
    assert [r.kind for r in ledger.records] == [kept]
    assert protocol.record_count() == 1
    [stored] = protocol.records(1)
    assert stored.kind == kept
    line = report.report_line(
        [rec(FAILED, "node2", -1, node_rank=2, rank=2, exitcode=3, ranks_ended=1), stored]
    )
    assert line is not None and line.endswith("; 1 rank stopped after it")


def test_the_report_off_writes_nothing_to_the_store() -> None:
    protocol = JobProtocol(FakeStore())
    ledger = Ledger(report=False, protocol=protocol)
    ledger.publish(rec(LOST, "node3", 0))
    ledger.publish_own(rec(STOPPED, "node1", 0, ranks_ended=1))
    assert protocol.record_count() == 0 and len(ledger.records) == 2


# --------------------------------------------------------------------------- a vanished node

#: Heartbeats every 2.5 s (peer timeout 10 s): vanished after 7.5 s of quiet, unsure after 3.75.
BEAT = 2.5


def _failed_job(store: FakeStore) -> JobProtocol:
    """node1's and node2's workers failed when their collectives broke (node3 was killed)."""
    protocol = JobProtocol(store)
    protocol.introduce("k3", "node3", 3)
    now = time.time()  # their workers failed 2 s ago; node3 was last heard from before that
    for name, rank in (("node1", 1), ("node2", 2)):
        failed = Record(FAILED, name, rank, now - 2, rank=rank, exitcode=1, ranks_ended=1)
        protocol.write_record(failed)
    protocol.write_record(Record(STOPPED, "node0", 0, now - 1, ranks_ended=1))
    return protocol


@pytest.mark.parametrize(
    ("quiet", "named"),
    [
        ({"k1": 1.0, "k2": 1.0, "k3": 8.0}, True),  # node3 wrote nothing and is silent: gone
        ({"k1": 1.0, "k2": 1.0, "k3": 2.0}, False),  # node3 beats: alive, only slow to write
        ({"k1": 1.0, "k2": 1.0}, False),  # node3's workers were done (not watched as quiet)
    ],
    ids=["silent", "beating", "done"],
)
def test_the_serving_node_names_a_member_that_vanished(
    monkeypatch: pytest.MonkeyPatch, quiet: Any, named: bool
) -> None:
    """A node killed outright writes no record; the survivors' collectives broke because of it
    and their failures come first in time. The watcher, which sees its heartbeat silent for
    three beats, gives it a LOST record from when it was last heard of: the first failure."""
    protocol = _failed_job(FakeStore())
    ledger = Ledger(report=True, protocol=protocol)
    monkeypatch.setattr(timing, "LINGER", 0.0)
    records = ledger.read_all(["k0", "k1", "k2", "k3"], True, 0.0, lambda: quiet, BEAT)
    line = report.report_line(records) or ""
    if named:
        assert line.startswith("torchrun_jsc: first failure: node3 (node rank 3) stopped"), line
        assert protocol.record_count() == 4
    else:
        assert line.startswith("torchrun_jsc: first failure: node1 (node rank 1): rank 1"), line
        assert protocol.record_count() == 3
    assert protocol.settled()


def test_the_serving_node_waits_for_a_member_that_may_have_vanished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Quiet for two beats at the settle time: not yet named, not yet let go; once quiet for
    three it is named, within the heartbeats it may wait more."""
    protocol = _failed_job(FakeStore())
    ledger = Ledger(report=True, protocol=protocol)
    monkeypatch.setattr(timing, "LINGER", 0.0)
    started = time.monotonic()

    def quiet() -> Any:
        return {"k1": 0.5, "k2": 0.5, "k3": 5.0 + (time.monotonic() - started)}

    records = ledger.read_all(["k0", "k1", "k2", "k3"], True, 0.0, quiet, BEAT)
    took = time.monotonic() - started
    assert 2.0 <= took < 4.0, took
    assert [r.hostname for r in records if r.kind == LOST] == ["node3"]


@pytest.mark.parametrize("settled", [True, False])
def test_the_other_nodes_wait_for_the_serving_nodes_word_at_most_three_beats(
    settled: bool,
) -> None:
    protocol = _failed_job(FakeStore())
    if settled:
        protocol.mark_settled()
    ledger = Ledger(report=True, protocol=protocol)
    started = time.monotonic()
    assert len(ledger.read_all(["k0", "k1", "k2", "k3"], False, 0.0, None, 0.4)) == 3
    took = time.monotonic() - started
    assert (took < 0.3) if settled else (1.1 <= took < 2.0), took


def test_the_records_are_counted_again_once_the_serving_node_has_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The serving node names the vanished node3 and says it is settled between another node's
    count and its look at that word: the record is read all the same (torch 2.0.1: node2 named
    its own broken collective as the first failure, the others node3)."""
    protocol = _failed_job(FakeStore())
    looks = [0]
    settled = protocol.settled

    def settles() -> bool:  # the first look: node3's LOST record and the word come together
        if looks[0] == 0:
            protocol.write_record(Record(LOST, "node3", 3, time.time() - 12))
            protocol.mark_settled()
        looks[0] += 1
        return settled()

    monkeypatch.setattr(protocol, "settled", settles)
    ledger = Ledger(report=True, protocol=protocol)
    records = ledger.read_all(["k0", "k1", "k2", "k3", "k4"], False, 0.0, None, 0.4)
    assert [r.hostname for r in records if r.kind == LOST] == ["node3"], records
    assert report.first_failure(records).hostname == "node3"


def test_a_stop_written_over_a_counter_is_no_word_from_its_member() -> None:
    """The watcher tells the others to stop by writing over their counters; a node that vanished
    must still look silent since its own last beat, or its LOST record comes too late."""
    from torchrun_jsc.runtime.session.threads import Heartbeats, Round

    protocol = JobProtocol(FakeStore())
    current = Round("a", ["a", "b"], serving=True, restarts_left=False)
    beats = Heartbeats(
        protocol, 10.0, lambda e: None, lambda: None, lambda: current, threading.Event()
    )
    protocol.beat("b")
    beats._scan(current)  # b heard from now
    time.sleep(0.3)
    protocol.tell_stop(rec(FAILED, "node0", 0), ["b"])
    beats._scan(current)
    assert beats.quiet("a")["b"] >= 0.3
    protocol.beat("b")  # a live member beats on after the stop: heard from again
    beats._scan(current)
    assert beats.quiet("a")["b"] < 0.3


@pytest.mark.parametrize(("slack", "first"), [(0.0, "node1"), (5.0, "node3")])
def test_a_lost_records_slack_counts_back_from_when_it_was_last_heard(
    slack: float, first: str
) -> None:
    failed = rec(FAILED, "node1", 7.0, node_rank=1, rank=1, exitcode=1)
    lost = rec(LOST, "node3", 9.0, node_rank=3, slack=slack)
    root = report.first_failure([failed, lost])
    assert root is not None and root.hostname == first


def test_what_a_node_lost_itself_reaches_the_requeue_beside_the_store_records() -> None:
    """A thawed host keeps its own LOST record (not published); the store's records make the
    line, and the requeue gets both (found on the cluster: without its own record, a thawed
    old host requeued a job that had gone on after a handover)."""
    ledger = Ledger(report=True)
    itself = Record(kind=LOST, hostname="node0", node_rank=0, what="this node, node0,")
    ledger.publish(itself, local=True)
    peer = Record(kind=LOST, hostname="node1", node_rank=1)
    last = LastLine()
    last.print(ledger, lambda: [peer], 1.0)
    assert last.seen == [peer, itself]
    alone = LastLine()
    alone.print(ledger, lambda: [], 1.0)
    assert alone.seen == [itself]
