"""The job watch's session on torch's hooks: its configuration, and which failure (or success)
a node records, from its own workers and from torch's monitor."""

from __future__ import annotations

import signal
import threading
from types import SimpleNamespace
from typing import Any, List

import pytest

from tests.unit.sessions import NOON, new_session
from torchrun_jsc.runtime import timing
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.records import failures
from torchrun_jsc.runtime.records.report import FAILED
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.timing import STORE_TIMEOUT
from torchrun_jsc.runtime.watch.vocabulary import Ask, Config, Phase, State, WorkersEnded


class _Failure:
    def __init__(self, pid: int, exitcode: int) -> None:
        self.pid, self.exitcode, self.local_rank = pid, exitcode, 0
        self.error_file, self.error_file_data, self.timestamp = "", {}, int(NOON)


def _result(failures: dict) -> Any:  # type: ignore[type-arg]
    return SimpleNamespace(failures=failures)


def _group() -> Any:
    return SimpleNamespace(workers=[object()])


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(("peer_timeout", "seconds"), [(12.0, 12.0), (0.0, STORE_TIMEOUT)])
def test_the_store_connection_times_out_after_the_peer_timeout(
    peer_timeout: float, seconds: float
) -> None:
    """Heartbeats get the peer timeout as their operation timeout (once they got a 30 s one
    when the failure report configured the session first); without heartbeats, the store's."""
    config = Config(
        hostname="node1",
        node_rank=1,
        store_host="node0i",
        store_port=29500,
        run_id="x",
        peer_timeout=peer_timeout,
        report=True,
    )
    session = Session(config, Workers())
    protocol = session._connect()
    assert protocol is not None and protocol.store.timeout == seconds  # type: ignore[attr-defined]
    session.at_exit()


# --------------------------------------------------------------------------- own failures


def test_a_stop_after_the_workers_ended_by_themselves_keeps_their_failure() -> None:
    """Told to stop when its worker had already died (gloo lost its peer): the node publishes
    no empty STOPPED record, so its own failure still counts in the report line."""
    session = new_session()
    session.stop_workers()  # nothing live to stop
    assert session.ledger.records == []
    record = failures.from_result(
        session.workers, "node0", 0, _group(), _result({0: _Failure(4242, 1)})
    )
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
    workers = Workers()
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
    record = failures.from_result(workers, "node0", 0, _group(), _result({0: stopped, 1: died}))
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

    session = new_session(node_rank=2)
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

    session = new_session(node_rank=1)
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

    session = new_session(node_rank=3)
    session.state = State(Phase.STOPPING, Ask.STOP, failed=True)
    agent = SimpleNamespace(_remaining_restarts=0)
    succeeded = SimpleNamespace(state=WorkerState.SUCCEEDED, failures={})
    assert session.around_monitor(agent, _monitor_group(3, 5.0), lambda a, g: succeeded) is (
        succeeded
    )
    assert session.state.succeeded and session.ledger.records == []
    exits: List[int] = []
    monkeypatch.setattr(timing, "EXIT_GRACE", 0.0)
    monkeypatch.setattr(session.workers, "stop_all", lambda grace: 0)
    monkeypatch.setattr("os._exit", exits.append)
    monkeypatch.setattr(session.ledger, "read_all", lambda *a: [])
    session.ending.end_workers()
    assert exits == [0]
