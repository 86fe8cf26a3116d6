"""The pure parts of the agent-side runtime: failure records and the report line, heartbeat
bookkeeping, the orphan watcher, the memory cgroup's out-of-memory count."""

from __future__ import annotations

import calendar
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Tuple

import pytest

from torchrun_jsc.runtime import heartbeats, orphans, report, workers
from torchrun_jsc.runtime.heartbeats import Tracker
from torchrun_jsc.runtime.report import FAILED, LOST, STOPPED, Record

if TYPE_CHECKING:
    from torchrun_jsc.runtime.session import Session

NOON = calendar.timegm((2026, 11, 30, 12, 0, 0))


def rec(kind: str, host: str, t: float, **kw: object) -> Record:
    return Record(kind=kind, hostname=host, time=NOON + t, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- records


def test_record_json_round_trip_and_garbage() -> None:
    r = rec(FAILED, "node2", 1.5, node_rank=2, rank=9, local_rank=1, exitcode=-9, oom=True)
    assert Record.from_json(r.to_json()) == r
    for text in ["", "{", "[]", '{"kind": "nope"}', '{"kind": "failed"}', '{"kind":"lost","x":1}']:
        found = Record.from_json(text)
        assert found is None or (found.kind == LOST and found.hostname == "")


@pytest.mark.parametrize(
    ("records", "root"),
    [
        ([], None),
        ([rec(STOPPED, "n1", 0)], None),
        ([rec(FAILED, "n2", 5), rec(FAILED, "n1", 3)], "n1"),
        ([rec(STOPPED, "n0", 1), rec(FAILED, "n3", 2)], "n3"),
        ([rec(LOST, "n2", 2), rec(FAILED, "n0", 9)], "n2"),
        ([rec(LOST, "n2", 2), rec(FAILED, "n0", 2)], "n0"),
    ],
    ids=["none", "only-stopped", "earliest", "stopped-never-root", "lost-first", "tie-failed"],
)
def test_first_failure(records: List[Record], root: Optional[str]) -> None:
    found = report.first_failure(records)
    assert (found.hostname if found else None) == root


@pytest.mark.parametrize(
    ("code", "oom", "text"),
    [
        (3, False, "exited with code 3"),
        (0, False, "exited with code 0"),
        (-15, False, "was killed by SIGTERM"),
        (-9, True, "was killed by the out-of-memory killer (SIGKILL)"),
        (-200, False, "was killed by signal 200"),
        (None, False, "ended"),
    ],
)
def test_how_it_ended(code: Optional[int], oom: bool, text: str) -> None:
    assert report.how_it_ended(code, oom) == text


def test_report_line_names_the_root_and_counts_the_rest() -> None:
    records = [
        rec(STOPPED, "node0", 9, node_rank=0, ranks_ended=4),
        rec(
            FAILED,
            "node2",
            1.25,
            node_rank=2,
            rank=9,
            local_rank=1,
            exitcode=3,
            message="ValueError: bad batch",
            ranks_ended=4,
        ),
        rec(FAILED, "node1", 2, node_rank=1, rank=5, local_rank=1, exitcode=1, ranks_ended=4),
    ]
    assert report.report_line(records) == (
        "torchrun_jsc: first failure: node2 (node rank 2): rank 9 (local rank 1) exited with code"
        " 3 at 12:00:01.250 UTC: ValueError: bad batch; 11 ranks stopped after it"
    )
    assert report.report_line([rec(STOPPED, "n", 0)]) is None


def test_report_line_never_counts_below_zero() -> None:
    """A failure record that counts no ended rank (nothing else known): no count at all."""
    line = report.report_line([rec(FAILED, "node2", 0, node_rank=2, rank=2, exitcode=3)])
    assert line is not None and line.endswith("exited with code 3 at 12:00:00.000 UTC")


def test_report_line_for_a_lost_host() -> None:
    lost = rec(LOST, "node1", 0, node_rank=1, what="the rendezvous host node0i:29500")
    assert report.report_line([lost]) == (
        "torchrun_jsc: first failure: the rendezvous host node0i:29500 stopped responding (last"
        " heard from at 12:00:00.000 UTC)"
    )


def test_error_file_message_is_one_line() -> None:
    data = {"message": {"message": "RuntimeError: boom\nsecond line", "extraInfo": {}}}
    assert report.error_file_message(data) == "RuntimeError: boom"
    assert report.error_file_message({"message": "<NONE>"}) == "<NONE>"
    assert report.error_file_message({}) == ""
    assert len(report.first_line("x" * 1000)) == 300


# --------------------------------------------------------------------------- heartbeats


def test_tracker_declares_a_quiet_member_lost_after_the_timeout() -> None:
    t = Tracker(timeout=60)
    t.members(["a", "b"], now=0)
    assert t.observe({"a": 1, "b": 1}, now=5) == []
    for second in range(10, 65, 5):
        assert t.observe({"a": second, "b": 1}, now=second) == []
    assert t.observe({"a": 70, "b": 1}, now=66) == ["b"]
    assert t.quiet_for("b", 66) == 61


def test_tracker_a_paused_watcher_raises_no_false_alarm() -> None:
    """The watcher itself frozen for 5 minutes: every live counter moved on meanwhile."""
    t = Tracker(timeout=60)
    t.members(["a", "b"], now=0)
    t.observe({"a": 1, "b": 1}, now=1)
    assert t.observe({"a": 61, "b": 58}, now=301) == []


def test_tracker_finished_members_may_go_quiet() -> None:
    t = Tracker(timeout=10)
    t.members(["a", "b"], now=0)
    t.finished("b")
    assert t.observe({"a": 5, "b": 1}, now=100) == []


def test_tracker_new_round_keeps_history_and_starts_newcomers_now() -> None:
    t = Tracker(timeout=10)
    t.members(["a", "b"], now=0)
    t.members(["a", "c"], now=8)
    assert t.observe({"a": 1, "c": None}, now=12) == []  # c: new, counted from 8
    assert t.observe({"a": 2, "c": None}, now=18) == ["c"]


def test_stop_signal_and_interval() -> None:
    assert heartbeats.is_stop_signal(heartbeats.STOP_BASE + 3)
    assert not heartbeats.is_stop_signal(12345)
    assert heartbeats.interval_for(60) == 5.0 and heartbeats.interval_for(10) == 2.5


@pytest.mark.parametrize(
    "stuck, silent, done, lost",
    [
        (0.0, 1.0, False, False),  # answering
        (10.0, 10.0, False, True),  # an operation hangs for the timeout
        (9.9, 9.9, False, False),
        (0.0, 12.4, False, False),  # failing operations: the timeout and one interval (2.5 s)
        (0.0, 12.5, False, True),
        (10.0, 10.0, True, True),  # workers done: a hanging host is still lost
        (0.0, 300.0, True, False),  # ... but one that refuses may simply have left first
    ],
)
def test_host_lost(stuck: float, silent: float, done: bool, lost: bool) -> None:
    assert heartbeats.host_lost(stuck, silent, 10.0, done) is lost


# --------------------------------------------------------------------------- workers


def test_watcher_reads_what_the_agent_wrote() -> None:
    lines = ["123 4567\n", "garbage\n", "\n", "x 1\n", "99 1 2\n", "7 88"]
    assert orphans.parse(lines) == [(123, "4567"), (7, "88")]


def test_start_time_is_that_of_the_process() -> None:
    mine = orphans.start_time(os.getpid())
    assert mine is not None and mine.isdigit()
    assert orphans.start_time(os.getpid()) == mine
    assert orphans.start_time(2**22 + 1) is None  # above Linux's largest pid


def test_watcher_kills_a_left_worker_and_its_group_but_not_a_reused_number() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], start_new_session=True, stdout=subprocess.PIPE
    )
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert leader.stdout is not None
        in_group = int(leader.stdout.readline())
        started = orphans.start_time(leader.pid)
        assert started is not None
        wrong = str(int(orphans.start_time(other.pid) or 0) + 1)  # as if the number was reused
        killed = orphans.kill_left([(leader.pid, started), (other.pid, wrong), (2**22 + 1, "1")])
        assert killed == [leader.pid]
        assert leader.wait(timeout=5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while _alive(in_group) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(in_group), "the worker's process group is killed with it"
        assert other.poll() is None, "a process that is not the worker it was told about lives"
    finally:
        other.kill()
        other.wait()
        leader.kill()
        leader.wait()


def test_watcher_leaves_a_worker_that_has_ended_but_is_not_reaped() -> None:
    done = subprocess.Popen(["true"])
    started = orphans.start_time(done.pid)
    assert started is not None
    deadline = time.monotonic() + 5
    while _alive(done.pid) and time.monotonic() < deadline:  # a zombie now: nobody waited
        time.sleep(0.02)
    try:
        assert orphans.kill_left([(done.pid, started)]) == [], "a zombie is not reported killed"
    finally:
        done.wait()


AGENT = """
import subprocess, sys
from torchrun_jsc.runtime import orphans
assert orphans.start() is None
worker = subprocess.Popen(["sleep", "60"])
orphans.tell(worker.pid)
print(worker.pid, flush=True)
sys.stdin.read()
"""


def test_workers_die_with_an_agent_killed_by_sigkill() -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None and agent.stderr is not None
    worker = int(agent.stdout.readline())
    watcher = [p for p in _children(agent.pid) if p != worker]
    assert len(watcher) == 1, "one watcher beside the worker"
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    deadline = time.monotonic() + 5
    while (_alive(worker) or _alive(watcher[0])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker), "the worker outlived its agent by 5 s"
    assert not _alive(watcher[0]), "the watcher ends once it has done its work"
    err = agent.stderr.read()
    assert f"the agent (pid {agent.pid}) ended and left 1 worker(s) running" in err, err


def test_watcher_ends_quietly_with_an_agent_whose_workers_are_done() -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT.replace('"sleep", "60"', '"true"')],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = agent.communicate("", timeout=30)  # the agent ends normally; so does the watcher
    assert agent.returncode == 0 and out.strip().isdigit()
    assert "torchrun_jsc" not in err, err


def _children(pid: int) -> List[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Running (not a zombie, not gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("cgroup", "files", "count"),
    [
        ("0::/slurm/job1\n", {"slurm/job1/memory.events": "low 0\noom 2\noom_kill 3\n"}, 3),
        (
            "5:memory:/slurm/job1\n4:cpu:/x\n",
            {"memory/slurm/job1/memory.oom_control": "oom_kill_disable 0\noom_kill 7\n"},
            7,
        ),
        ("0::/x\n", {}, None),
    ],
    ids=["v2", "v1", "unreadable"],
)
def test_oom_count_from_the_memory_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cgroup: str, files: dict, count: Optional[int]
) -> None:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(cgroup)
    for name, text in files.items():
        path = tmp_path / "sys" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    real = Path

    def fake(*parts: str) -> Path:
        joined = "/".join(parts)
        if joined == "/proc/self/cgroup":
            return proc
        if joined.startswith("/sys/fs/cgroup"):
            return real(str(tmp_path / "sys") + joined[len("/sys/fs/cgroup") :])
        return real(*parts)

    monkeypatch.setattr(workers, "Path", fake)
    assert workers.oom_kills() == count


# --------------------------------------------------------------------------- session


class _Failure:
    def __init__(self, pid: int, exitcode: int) -> None:
        self.pid, self.exitcode, self.local_rank = pid, exitcode, 0
        self.error_file, self.error_file_data, self.timestamp = "", {}, int(NOON)


class _Result:
    def __init__(self, failures: dict) -> None:  # type: ignore[type-arg]
        self.failures = failures


class _Group:
    def __init__(self) -> None:
        self.workers = [object()]


def test_a_stop_after_the_workers_ended_by_themselves_keeps_their_failure() -> None:
    """Told to stop when its worker had already died (gloo lost its peer): the node publishes
    no empty STOPPED record, so its own failure still counts in the report line."""
    from torchrun_jsc.runtime.session import Node, Session

    workers.forget()
    session = Session(node=Node(hostname="node0", node_rank=0), report=True)
    session._stop_workers()  # nothing live to stop
    assert session.records == []
    session._final_failure(_Group(), _Result({0: _Failure(4242, 1)}))
    assert [(r.kind, r.rank, r.exitcode, r.ranks_ended) for r in session.records] == [
        (FAILED, 0, 1, 1)
    ]


@pytest.mark.parametrize("noted_late", [True, False], ids=["noted-late", "never-noted"])
def test_a_worker_torch_stopped_after_the_first_failure_does_not_become_it(
    monkeypatch: pytest.MonkeyPatch, noted_late: bool
) -> None:
    """Rank 1 died (its exit noted at 12:00:00.5); torch then stopped rank 0, whose watch thread
    had not run yet when the report was made (a loaded node). torch stamps both 12:00:00 (whole
    seconds): rank 0 must not come first by that truncated stamp."""
    import threading
    from types import SimpleNamespace

    from torchrun_jsc.runtime import session as session_module
    from torchrun_jsc.runtime.session import Node, Session

    workers.forget()
    monkeypatch.setattr(session_module, "EXIT_NOTE_WAIT", 0.5)
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
    session = Session(node=Node(hostname="node0", node_rank=0), report=True)
    session._final_failure(_Group(), _Result({0: stopped, 1: died}))
    workers.forget()
    [record] = session.records
    assert (record.rank, record.local_rank, record.exitcode) == (1, 1, -signal.SIGKILL)
    assert record.time == NOON + 0.5


def test_the_end_of_the_process_stops_the_watch_threads() -> None:
    import threading

    from torchrun_jsc.runtime.session import Session

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


def test_a_stop_that_finds_the_workers_failed_records_their_failure() -> None:
    """The stop request reached the monitor after this node's worker had died by itself: the
    monitor still reports that failure (the node's record), not an empty stop."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.api import WorkerState

    from torchrun_jsc.runtime.session import Node, Session

    workers.forget()
    session = Session(node=Node(hostname="node2", node_rank=2), report=True, request="stop")
    agent = SimpleNamespace(_remaining_restarts=3)
    worker = SimpleNamespace(local_rank=0, global_rank=2, id=None)
    group = SimpleNamespace(workers=[worker], spec=SimpleNamespace(monitor_interval=0.1))
    failed = SimpleNamespace(state=WorkerState.FAILED, failures={2: _Failure(4243, 3)})
    result = session.around_monitor(agent, group, lambda a, g: failed)
    assert result is failed and agent._remaining_restarts == 0
    assert [(r.kind, r.rank, r.exitcode) for r in session.records] == [(FAILED, 2, 3)]
    healthy = SimpleNamespace(state=WorkerState.HEALTHY, failures={})
    session.request = "stop"
    assert session.around_monitor(agent, group, lambda a, g: healthy).state == WorkerState.FAILED


def _failed_session(node_rank: int = 0) -> object:
    from torchrun_jsc.runtime.session import Node, Session

    session = Session(node=Node(hostname=f"node{node_rank}", node_rank=node_rank), report=True)
    session.failed = True
    session.records.append(
        rec(FAILED, "node2", 0, node_rank=2, rank=2, local_rank=0, exitcode=3, ranks_ended=1)
    )
    return session


def test_a_second_caller_waits_for_the_last_line_instead_of_cutting_it_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stopping thread and the process's end both try to print the last line: whichever
    comes second returns only once the line is out (before, it returned at once and the
    stopping thread ended the process while the host was still reading the records)."""
    import threading
    import time

    session = _failed_session()
    read = threading.Event()

    def slow_read() -> List[Record]:
        read.set()
        time.sleep(0.5)
        return list(session.records)  # type: ignore[attr-defined]

    monkeypatch.setattr(session, "_read_records", slow_read)
    printer = threading.Thread(target=session._print_report)  # type: ignore[attr-defined]
    printer.start()
    assert read.wait(5)
    session._print_report()  # type: ignore[attr-defined]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("torchrun_jsc: first failure: node2")
    printer.join(5)
    assert [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()] == []


@pytest.mark.parametrize("exiting", [False, True])
def test_the_stopping_thread_ends_the_process_only_if_the_agent_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exiting: bool
) -> None:
    from torchrun_jsc.runtime import session as module

    session = _failed_session()
    session.exiting = exiting  # type: ignore[attr-defined]
    session.printed = exiting  # type: ignore[attr-defined]  # the end printed it already
    session.reported.set()  # type: ignore[attr-defined]
    exits: List[int] = []
    monkeypatch.setattr(module, "EXIT_GRACE", 0.0)
    monkeypatch.setattr(module.workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr(module.os, "_exit", exits.append)
    monkeypatch.setattr(session, "_read_records", lambda: [])
    session._end_workers()  # type: ignore[attr-defined]
    assert exits == ([] if exiting else [1])
    printed = "first failure: node2" in capsys.readouterr().err
    assert printed is not exiting


class _Store:
    def __init__(self, busy_for: float, texts: List[str]) -> None:
        self.busy_for, self.texts, self.reads = busy_for, texts, 0

    def in_flight(self, now: Optional[float] = None) -> float:
        return self.busy_for

    def add(self, name: str, amount: int) -> int:
        self.reads += name == "fail/read"
        return len(self.texts) if name == "fail/n" else self.reads

    def get_many(self, names: List[str]) -> dict:  # type: ignore[type-arg]
        return {n: self.texts[int(n.split("/")[1]) - 1] for n in names}


@pytest.mark.parametrize("busy_for, found", [(0.0, 2), (0.3, 2), (30.0, 0)])
def test_reading_the_records_gives_up_only_on_a_hanging_operation(
    busy_for: float, found: int
) -> None:
    """Another thread's heartbeat in flight is no reason to skip the other nodes' records (the
    report then lacked the count of ranks stopped after the failure); one stuck for long is."""
    session = _failed_session(node_rank=1)
    texts = [
        rec(FAILED, "node2", 0, node_rank=2, rank=2, exitcode=3, ranks_ended=1).to_json(),
        rec(STOPPED, "node1", 1, node_rank=1, ranks_ended=1).to_json(),
    ]
    session.store = _Store(busy_for, texts)  # type: ignore[attr-defined]
    session.members = ["a", "b"]  # type: ignore[attr-defined]
    assert len(session._read_records()) == found  # type: ignore[attr-defined]


@pytest.mark.parametrize("lost, waits", [([], True), (["c"], False)])
def test_the_store_host_waits_for_readers_but_not_for_a_lost_node(
    monkeypatch: pytest.MonkeyPatch, lost: List[str], waits: bool
) -> None:
    """At a failure the node serving the store lingers until every member has read the records;
    a node it declared lost never will, so it is not waited for (the job ended LINGER later)."""
    from torchrun_jsc.runtime import session as module
    from torchrun_jsc.runtime.session import Node, Session

    monkeypatch.setattr(module, "LINGER", 1.0)
    monkeypatch.setattr(module, "SETTLE", 0.0)
    host = Session(node=Node(hostname="node0", node_rank=0, is_host=True), report=True)
    texts = [rec(STOPPED, n, 1, ranks_ended=1).to_json() for n in ("node0", "node1", "node2")]

    class Readers(_Store):
        def add(self, name: str, amount: int) -> int:  # node1 has read too: two readers
            return len(self.texts) if name == "fail/n" else 2

    host.store = Readers(0.0, texts)  # type: ignore[assignment]
    host.members = ["a", "b", "c"]
    host.lost = lost
    started = time.monotonic()
    assert len(host._read_records()) == 3
    took = time.monotonic() - started
    assert (took >= 0.9) if waits else (took < 0.5), took


def test_the_end_of_the_process_waits_for_store_calls_in_flight() -> None:
    import threading
    import time

    from torchrun_jsc.runtime.session import Session, bounded

    left = threading.Event()

    def call() -> None:
        time.sleep(0.3)
        left.set()

    assert bounded(call, 0.01) is None  # gave up waiting; the call goes on
    Session().at_exit()
    assert left.is_set()


class _SlotStore:
    """What the job watch writes: the record counter and the records' slots."""

    def __init__(self) -> None:
        self.values: dict = {}  # type: ignore[type-arg]

    def add(self, name: str, amount: int) -> int:
        self.values[name] = int(self.values.get(name, 0)) + amount
        return int(self.values[name])

    def set(self, name: str, value: str) -> None:
        self.values[name] = value


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
    from torchrun_jsc.runtime.session import Node, Session

    session = Session(node=Node(hostname="node1", node_rank=1), report=True)
    store = _SlotStore()
    session.store = store  # type: ignore[assignment]
    for kind in (first, second):
        session._publish_own(rec(kind, "node1", 0, node_rank=1, ranks_ended=1))
    assert [r.kind for r in session.records] == [kept]
    assert store.values["fail/n"] == 1
    stored = Record.from_json(store.values["fail/1"])
    assert stored is not None and stored.kind == kept
    line = report.report_line(
        [rec(FAILED, "node2", -1, node_rank=2, rank=2, exitcode=3, ranks_ended=1), stored]
    )
    assert line is not None and line.endswith("; 1 rank stopped after it")


class _HeartbeatStore(_SlotStore):
    """Counters and keys as the job watch reads and writes them (``peek`` of missing keys)."""

    def peek(self, name: str) -> Optional[str]:
        value = self.values.get(name)
        return None if value is None else str(value)

    def first(self, name: str, value: str) -> str:
        return str(self.values.setdefault(name, value))

    def get_many(self, names: List[str]) -> dict:  # type: ignore[type-arg]
        return {n: str(self.values[n]) for n in names if n in self.values}

    def in_flight(self, now: Optional[float] = None) -> float:
        return 0.0


def _done_session(
    monkeypatch: pytest.MonkeyPatch, is_host: bool = False
) -> Tuple[Session, _HeartbeatStore, List[int]]:
    """A node whose workers have finished, with a store, its last line and its end caught."""
    from torchrun_jsc.runtime import session as module
    from torchrun_jsc.runtime.session import Node, Session

    monkeypatch.setattr(module, "SETTLE", 0.0)
    monkeypatch.setattr(module, "LINGER", 0.0)
    exits: List[int] = []
    monkeypatch.setattr(module.os, "_exit", exits.append)
    node = Node(hostname="node0", node_rank=0, is_host=is_host, endpoint="node0i:29500")
    session = Session(node=node, peer_timeout=10.0, report=True)
    store = _HeartbeatStore()
    session.store = store  # type: ignore[assignment]
    session.me, session.members = "a", ["a", "b", "c"]
    return session, store, exits


def _wait_for(exits: List[int]) -> None:
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_node_whose_workers_finished_ends_with_0_when_another_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, it ignored the stop and waited in torch's exit barrier (300 s), printing
    nothing: the others' failure was never named on it."""
    session, store, exits = _done_session(monkeypatch)
    failure = rec(FAILED, "node1", 0, node_rank=1, rank=1, local_rank=0, exitcode=3, ranks_ended=1)
    store.values["fail/n"], store.values["fail/1"] = 1, failure.to_json()
    store.values["stop"] = failure.to_json()
    session.done = True
    session._told_to_stop()
    _wait_for(exits)
    assert exits == [0]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
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
    from torchrun_jsc.runtime.session import DONE_BASE

    session, store, exits = _done_session(monkeypatch)
    store.values["hb/a"] = heartbeats.STOP_BASE
    session._finished()
    _wait_for(exits)
    assert heartbeats.is_stop_signal(int(store.values["hb/a"])) and exits == [0]
    calm, calm_store, calm_exits = _done_session(monkeypatch)
    calm_store.values["hb/a"] = 41  # no stop: marked done, the node goes on to torch's barrier
    calm._finished()
    time.sleep(0.2)
    assert int(calm_store.values["hb/a"]) == 41 + DONE_BASE and calm_exits == []


def test_a_host_whose_workers_finished_still_names_a_lost_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store host's workers are done; node1 stops beating: it is declared lost, everyone is
    told, and the host ends with 0 (its own workers succeeded) instead of waiting 300 s."""
    session, store, exits = _done_session(monkeypatch, is_host=True)
    session.done = True
    from torchrun_jsc.runtime.session import DONE_BASE

    earlier = time.monotonic() - 100.0
    tracker = Tracker(10.0)
    tracker.members(["a", "b", "c"], earlier)
    tracker.observe({"a": 5, "b": 5, "c": 5}, earlier)
    session.tracker = tracker
    # a (this node) beats on; b has been quiet for 100 s; c's workers are done (not lost)
    store.values.update({"hb/a": 6, "hb/b": 5, "hb/c": DONE_BASE + 5})
    session._scan(["a", "b", "c"])
    _wait_for(exits)
    assert exits == [0]
    assert store.values["hb/b"] == str(heartbeats.STOP_BASE)
    assert store.values["hb/c"] == str(heartbeats.STOP_BASE)
    stop = Record.from_json(store.values["stop"])
    assert stop is not None and stop.kind == LOST
    err = capsys.readouterr().err
    assert "has not been heard from for" in err and "not waiting in torch's exit barrier" in err


@pytest.mark.parametrize("stopped", [True, False])
def test_a_finished_node_looks_for_a_failure_at_its_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stopped: bool
) -> None:
    """torch < 2.1 lets the barrier pass once the failed node reaches it too, often before this
    node's next heartbeat: its end looks at the stop key once, so it names the failure too."""
    session, store, exits = _done_session(monkeypatch)
    failure = rec(FAILED, "node1", 0, node_rank=1, rank=1, local_rank=0, exitcode=3, ranks_ended=1)
    store.values["fail/n"], store.values["fail/1"] = 1, failure.to_json()
    if stopped:
        store.values["stop"] = failure.to_json()
    session.done = True
    session.at_exit()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    expected = ["first failure: node1 (node rank 1): rank 1"] if stopped else []
    assert [ln[len("torchrun_jsc: ") :][:42] for ln in lines] == expected
    assert exits == []


def test_a_stop_that_finds_the_workers_succeeded_keeps_the_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop arrived after every worker had exited 0 but before torch's monitor looked (5 s
    apart before torch 2.4): the node succeeded and ends with 0 (before: a FAILED result and
    exit 1, as if its workers had been stopped)."""
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.api import WorkerState

    from torchrun_jsc.runtime import session as module
    from torchrun_jsc.runtime.session import Node, Session

    workers.forget()
    session = Session(node=Node(hostname="node3", node_rank=3), report=True)
    session.stopping = session.failed = True  # what _stop_node sets (without its thread)
    session.request = "stop"
    agent = SimpleNamespace(_remaining_restarts=0)
    worker = SimpleNamespace(local_rank=0, global_rank=3, id=None)
    group = SimpleNamespace(workers=[worker], spec=SimpleNamespace(monitor_interval=5.0))
    succeeded = SimpleNamespace(state=WorkerState.SUCCEEDED, failures={})
    assert session.around_monitor(agent, group, lambda a, g: succeeded) is succeeded
    assert session.done and session.records == []
    exits: List[int] = []
    monkeypatch.setattr(module, "EXIT_GRACE", 0.0)
    monkeypatch.setattr(module.workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr(module.os, "_exit", exits.append)
    monkeypatch.setattr(session, "_read_records", lambda: [])
    session._end_workers()
    assert exits == [0]
