"""The job watch wired together (session, ledger, heartbeats, stopping) on the one fake store:
torch's hooks and the watch's threads as events, their effects as the store, the lines
printed and the process's end."""

from __future__ import annotations

import calendar
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any, List, Tuple

import pytest

from tests.unit.fakestore import FakeStore
from torchrun_jsc.runtime import failures, report, timing, workers
from torchrun_jsc.runtime.beating import Heartbeats, Round
from torchrun_jsc.runtime.heartbeats import Tracker
from torchrun_jsc.runtime.ledger import Ledger
from torchrun_jsc.runtime.protocol import JobProtocol
from torchrun_jsc.runtime.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.session import Node, Session
from torchrun_jsc.runtime.watch import Ask, Phase, State, WorkersEnded

NOON = calendar.timegm((2026, 11, 30, 12, 0, 0))


def rec(kind: str, host: str, t: float, **kw: Any) -> Record:
    return Record(kind=kind, hostname=host, time=NOON + t, **kw)


class _Failure:
    def __init__(self, pid: int, exitcode: int) -> None:
        self.pid, self.exitcode, self.local_rank = pid, exitcode, 0
        self.error_file, self.error_file_data, self.timestamp = "", {}, int(NOON)


def _result(failures: dict) -> Any:  # type: ignore[type-arg]
    return SimpleNamespace(failures=failures)


def _group() -> Any:
    return SimpleNamespace(workers=[object()])


def _session(node_rank: int = 0, peer_timeout: float = 0.0, **node: Any) -> Session:
    session = Session(node=Node(hostname=f"node{node_rank}", node_rank=node_rank, **node))
    session.configure(session.node, peer_timeout=peer_timeout, report=True)  # type: ignore[arg-type]
    return session


def _with_store(session: Session) -> FakeStore:
    store = FakeStore()
    session.protocol = JobProtocol(store)
    session.ledger.protocol = session.protocol
    return store


def _lines(capsys: pytest.CaptureFixture[str]) -> List[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("order", ["peer-first", "report-first"])
def test_the_store_connection_does_not_depend_on_the_order_of_the_patches(order: str) -> None:
    """Before, the first patch installed made the store connection with its own timeout: with
    the failure report first, heartbeats got a 30 s operation timeout instead of the peer's."""
    node = Node(hostname="node1", node_rank=1, store_host="node0i", store_port=29500, run_id="x")
    session = Session()
    parts = [{"peer_timeout": 12.0}, {"report": True}]
    for part in parts if order == "peer-first" else parts[::-1]:
        session.configure(node, **part)  # type: ignore[arg-type]
    assert session.config.peer_timeout == 12.0 and session.config.report
    protocol = session._connect()
    assert protocol is not None and protocol.store.timeout == 12.0  # type: ignore[attr-defined]
    session.at_exit()


# --------------------------------------------------------------------------- own failures


def test_a_stop_after_the_workers_ended_by_themselves_keeps_their_failure() -> None:
    """Told to stop when its worker had already died (gloo lost its peer): the node publishes
    no empty STOPPED record, so its own failure still counts in the report line."""
    workers.forget()
    session = _session()
    session.stop_workers()  # nothing live to stop
    assert session.ledger.records == []
    record = failures.from_result("node0", 0, _group(), _result({0: _Failure(4242, 1)}))
    session.state = State(Phase.TRAINING)
    session.post(WorkersEnded(succeeded=False, final=True, record=record))
    assert [(r.kind, r.rank, r.exitcode, r.ranks_ended) for r in session.ledger.records] == [
        (FAILED, 0, 1, 1)
    ]
    assert session.state.phase == Phase.FAILED and session.state.failed


@pytest.mark.parametrize("noted_late", [True, False], ids=["noted-late", "never-noted"])
def test_a_worker_torch_stopped_after_the_first_failure_does_not_become_it(
    monkeypatch: pytest.MonkeyPatch, noted_late: bool
) -> None:
    """Rank 1 died (its exit noted at 12:00:00.5); torch then stopped rank 0, whose watch thread
    had not run yet when the report was made (a loaded node). torch stamps both 12:00:00 (whole
    seconds): rank 0 must not come first by that truncated stamp."""
    workers.forget()
    monkeypatch.setattr(timing, "EXIT_NOTE_WAIT", 0.5)
    for pid in (4301, 4300):
        workers._procs[pid] = SimpleNamespace(pid=pid, returncode=None)
    workers._exits[4301] = NOON + 0.5
    if noted_late:

        def note() -> None:
            with workers._lock:
                workers._exits[4300] = NOON + 0.58

        threading.Timer(0.1, note).start()
    stopped, died = _Failure(4300, -signal.SIGTERM), _Failure(4301, -signal.SIGKILL)
    died.local_rank = 1
    record = failures.from_result("node0", 0, _group(), _result({0: stopped, 1: died}))
    workers.forget()
    assert (record.rank, record.local_rank, record.exitcode) == (1, 1, -signal.SIGKILL)
    assert record.time == NOON + 0.5


# --------------------------------------------------------------------------- torch's monitor


def _monitor_group(rank: int, interval: float) -> Any:
    worker = SimpleNamespace(local_rank=0, global_rank=rank, id=None)
    return SimpleNamespace(workers=[worker], spec=SimpleNamespace(monitor_interval=interval))


def test_a_stop_that_finds_the_workers_failed_records_their_failure() -> None:
    """The stop request reached the monitor after this node's worker had died by itself: the
    monitor still reports that failure (the node's record), not an empty stop."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    workers.forget()
    session = _session(node_rank=2)
    session.state = State(Phase.STOPPING, Ask.STOP, failed=True)
    agent = SimpleNamespace(_remaining_restarts=3)
    group = _monitor_group(2, 0.1)
    failed = SimpleNamespace(state=WorkerState.FAILED, failures={2: _Failure(4243, 3)})
    result = session.around_monitor(agent, group, lambda a, g: failed)
    assert result is failed and agent._remaining_restarts == 0
    assert [(r.kind, r.rank, r.exitcode) for r in session.ledger.records] == [(FAILED, 2, 3)]
    healthy = SimpleNamespace(state=WorkerState.HEALTHY, failures={})
    session.state = session.state._replace(answer=Ask.STOP)
    assert session.around_monitor(agent, group, lambda a, g: healthy).state == WorkerState.FAILED


def test_a_restart_is_answered_once_and_torch_restarts() -> None:
    from torch.distributed.elastic.agent.server.api import WorkerState

    session = _session(node_rank=1)
    session.state = State(Phase.RESTARTING, Ask.RESTART)
    agent = SimpleNamespace(_remaining_restarts=2)
    group = _monitor_group(1, 0.1)
    healthy = SimpleNamespace(state=WorkerState.HEALTHY, failures={})
    assert session.around_monitor(agent, group, lambda a, g: healthy).state == WorkerState.FAILED
    assert agent._remaining_restarts == 2  # torch spends one as it restarts
    assert session.around_monitor(agent, group, lambda a, g: healthy) is healthy


def test_a_stop_that_finds_the_workers_succeeded_keeps_the_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop arrived after every worker had exited 0 but before torch's monitor looked (5 s
    apart before torch 2.4): the node succeeded and ends with 0 (before: a FAILED result and
    exit 1, as if its workers had been stopped)."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    workers.forget()
    session = _session(node_rank=3)
    session.state = State(Phase.STOPPING, Ask.STOP, failed=True)
    agent = SimpleNamespace(_remaining_restarts=0)
    succeeded = SimpleNamespace(state=WorkerState.SUCCEEDED, failures={})
    assert session.around_monitor(agent, _monitor_group(3, 5.0), lambda a, g: succeeded) is (
        succeeded
    )
    assert session.state.succeeded and session.ledger.records == []
    exits: List[int] = []
    monkeypatch.setattr(timing, "EXIT_GRACE", 0.0)
    monkeypatch.setattr(workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr("os._exit", exits.append)
    monkeypatch.setattr(session.ledger, "read_all", lambda *a: [])
    session._end_workers()
    assert exits == [0]


# --------------------------------------------------------------------------- the last line


def _failed_session(node_rank: int = 0) -> Session:
    session = _session(node_rank=node_rank)
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

    _with_store(session)
    monkeypatch.setattr(session.ledger, "read_all", slow_read)
    printer = threading.Thread(target=session.print_last_line)
    printer.start()
    assert read.wait(5)
    session.print_last_line()
    lines = _lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("torchrun_jsc: first failure: node2")
    printer.join(5)
    assert _lines(capsys) == []


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
    monkeypatch.setattr(workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr("os._exit", exits.append)
    session._end_workers()
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


# --------------------------------------------------------------------------- the process's end


def test_the_end_of_the_process_stops_the_watch_threads() -> None:
    session = Session()
    beats: List[int] = []

    def beat() -> None:
        while not session.closing.wait(0.01):
            beats.append(1)

    thread = threading.Thread(target=beat, daemon=True)
    session.threads.append(thread)
    thread.start()
    session.at_exit()
    assert session.closing.is_set() and not thread.is_alive()


def test_the_end_of_the_process_waits_for_store_calls_in_flight() -> None:
    from torchrun_jsc.runtime.bounded import bounded

    left = threading.Event()

    def call() -> None:
        time.sleep(0.3)
        left.set()

    assert bounded(call, 0.01) is None  # gave up waiting; the call goes on
    Session().at_exit()
    assert left.is_set()


def _done_session(
    monkeypatch: pytest.MonkeyPatch, is_host: bool = False
) -> Tuple[Session, JobProtocol, List[int]]:
    """A node whose workers have finished, with a store, its last line and its end caught."""
    monkeypatch.setattr(timing, "SETTLE", 0.0)
    monkeypatch.setattr(timing, "LINGER", 0.0)
    exits: List[int] = []
    monkeypatch.setattr("os._exit", exits.append)
    session = _session(peer_timeout=10.0, is_host=is_host, endpoint="node0i:29500")
    _with_store(session)
    session.me, session.members = "a", ["a", "b", "c"]
    session.state = State(Phase.FINISHED, succeeded=True)
    assert session.protocol is not None
    return session, session.protocol, exits


def _wait_for(exits: List[int]) -> None:
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.01)


FAILURE = rec(FAILED, "node1", 0, node_rank=1, rank=1, local_rank=0, exitcode=3, ranks_ended=1)


def test_a_node_whose_workers_finished_ends_with_0_when_another_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, it ignored the stop and waited in torch's exit barrier (300 s), printing
    nothing: the others' failure was never named on it."""
    session, protocol, exits = _done_session(monkeypatch)
    protocol.write_record(FAILURE)
    protocol.tell_stop(FAILURE, ["a"])
    session._told_to_stop()
    _wait_for(exits)
    assert exits == [0]
    lines = _lines(capsys)
    assert lines[0].startswith("torchrun_jsc: node1 (node rank 1): rank 1 (local rank 0) exited")
    assert lines[0].endswith("not waiting in torch's exit barrier")
    assert lines[-1].startswith("torchrun_jsc: first failure: node1 (node rank 1): rank 1")
    assert len(lines) == 2


def test_a_stop_written_before_the_workers_finished_is_not_overwritten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The failing node told everyone to stop just before this node's workers succeeded:
    marking itself done keeps the stop value (before, a set overwrote it, and the node waited
    in the exit barrier)."""
    session, protocol, exits = _done_session(monkeypatch)
    session.state = State(Phase.TRAINING)
    protocol.tell_stop(FAILURE, ["a"])
    session.post(WorkersEnded(succeeded=True, final=True))
    _wait_for(exits)
    assert protocol.beats(["a"])["a"].stop and exits == [0]  # type: ignore[union-attr]
    calm, calm_protocol, calm_exits = _done_session(monkeypatch)
    calm.state = State(Phase.TRAINING)
    calm_protocol.beat("a")  # no stop: marked done, the node goes on to torch's barrier
    calm.post(WorkersEnded(succeeded=True, final=True))
    time.sleep(0.2)
    beat = calm_protocol.beats(["a"])["a"]
    assert beat is not None and beat.done and beat.beats == 1 and calm_exits == []


def test_a_host_whose_workers_finished_still_names_a_lost_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store host's workers are done; node1 stops beating: it is declared lost, everyone is
    told, and the host ends with 0 (its own workers succeeded) instead of waiting 300 s."""
    session, protocol, exits = _done_session(monkeypatch, is_host=True)
    beats = Heartbeats(
        protocol, 10.0, session.post, session._told_to_stop, session._round, session.closing
    )
    session.beats = beats
    earlier = time.monotonic() - 100.0
    beats.tracker = Tracker(10.0)
    beats.tracker.members(["a", "b", "c"], earlier)
    beats._known = ["a", "b", "c"]
    protocol.watch(["a", "b", "c"])
    beats.tracker.observe(protocol.beats(["a", "b", "c"]), earlier)  # all heard from, 100 s ago
    protocol.introduce("b", "node1", 1)
    protocol.beat("a")  # a (this node) beats on; b has been quiet for 100 s
    protocol.mark_done("c")  # c's workers are done (not lost)
    beats._scan(Round("a", ["a", "b", "c"], serving=True, restarts_left=False))
    _wait_for(exits)
    assert exits == [0]
    told = protocol.beats(["b", "c"])
    assert all(beat is not None and beat.stop for beat in told.values())
    stop = protocol.stop_cause()
    assert stop is not None and stop.kind == LOST and stop.hostname == "node1"
    err = capsys.readouterr().err
    assert "torchrun_jsc: node1 (node rank 1) has not been heard from for 100 s" in err
    assert "not waiting in torch's exit barrier" in err


@pytest.mark.parametrize("stopped", [True, False])
def test_a_finished_node_looks_for_a_failure_at_its_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stopped: bool
) -> None:
    """torch < 2.1 lets the barrier pass once the failed node reaches it too, often before this
    node's next heartbeat: its end looks at the stop key once, so it names the failure too."""
    session, protocol, exits = _done_session(monkeypatch)
    protocol.write_record(FAILURE)
    if stopped:
        protocol.tell_stop(FAILURE, [])
    session.at_exit()
    lines = _lines(capsys)
    expected = ["first failure: node1 (node rank 1): rank 1"] if stopped else []
    assert [ln[len("torchrun_jsc: ") :][:42] for ln in lines] == expected
    assert exits == []


def test_every_action_has_its_owner() -> None:
    """Each action :func:`~torchrun_jsc.runtime.watch.decide` can return is carried out by a
    handler of the session (the monitor's answer is read in torch's thread instead)."""
    from typing import get_args

    from torchrun_jsc.runtime import watch

    for action in get_args(watch.Action):
        if action is not watch.Answer:
            assert callable(getattr(Session, f"_do_{action.__name__}", None)), action


def test_the_heartbeat_loop_survives_a_refusing_store_and_reports_a_stop() -> None:
    """A store that refuses is the watchdog's business: the loop goes on beating, and once the
    store answers with a stop it says so (once per beat until the watch has ended)."""
    store = FakeStore()
    protocol = JobProtocol(store)
    closing = threading.Event()
    told: List[int] = []
    beats = Heartbeats(
        protocol,
        0.4,  # a beat every 0.1 s
        lambda event: None,
        lambda: told.append(1),
        lambda: Round("a", ["a"], serving=False, restarts_left=False),
        closing,
    )
    store.refuse = True
    thread = threading.Thread(target=beats.run, daemon=True)
    thread.start()
    time.sleep(0.35)
    assert thread.is_alive() and told == []
    store.refuse = False
    protocol.tell_stop(FAILURE, ["a"])
    deadline = time.monotonic() + 5
    while not told and time.monotonic() < deadline:
        time.sleep(0.02)
    closing.set()
    thread.join(2)
    assert told and not thread.is_alive()


def test_the_watchdog_reports_a_hanging_store() -> None:
    from torchrun_jsc.runtime.beating import watch_store
    from torchrun_jsc.runtime.watch import StoreQuiet

    store = FakeStore()
    store.busy_for = 42.0
    closing = threading.Event()
    seen: List[Any] = []

    def post(event: Any) -> None:
        seen.append(event)
        closing.set()

    watch_store(JobProtocol(store), post, closing)
    [event] = seen
    assert isinstance(event, StoreQuiet) and event.stuck == 42.0 and event.silent >= 0.0
