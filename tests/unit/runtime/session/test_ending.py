"""The job watch's session at the process's end (its exit code, the watch's threads stopped,
store calls in flight) and the threads' own loops on the fake store."""

from __future__ import annotations

import threading
import time
from typing import Any, List, Optional, Tuple

import pytest

from tests.unit.fakestore import FakeStore
from tests.unit.sessions import err_lines, new_session, rec, with_store
from torchrun_jsc.runtime import timing
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.records.report import FAILED, LOST
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.session.threads import Heartbeats, Round
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.heartbeats import Tracker
from torchrun_jsc.runtime.watch.vocabulary import Config, Member, Phase, State, WorkersEnded

# --------------------------------------------------------------------------- the process's end


def test_the_end_of_the_process_stops_the_watch_threads() -> None:
    session = Session(Config(), Workers())
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
    from torchrun_jsc.runtime.store.bounded import bounded

    left = threading.Event()

    def call() -> None:
        time.sleep(0.3)
        left.set()

    assert bounded(call, 0.01) is None  # gave up waiting; the call goes on
    Session(Config(), Workers()).at_exit()
    assert left.is_set()


def _done_session(
    monkeypatch: pytest.MonkeyPatch, is_host: bool = False
) -> Tuple[Session, JobProtocol, List[int]]:
    """A node whose workers have finished, with a store, its last line and its end caught."""
    monkeypatch.setattr(timing, "SETTLE", 0.0)
    monkeypatch.setattr(timing, "LINGER", 0.0)
    exits: List[int] = []
    monkeypatch.setattr("os._exit", exits.append)
    session = new_session(peer_timeout=10.0, is_host=is_host, endpoint="node0i:29500")
    with_store(session)
    session.me, session.members = "a", ["a", "b", "c"]
    session.state = State(Phase.FINISHED, succeeded=True)
    assert session.protocol is not None
    if not is_host:
        session.protocol.mark_settled()  # the serving node has added every record it will
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
    lines = err_lines(capsys)
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
    lines = err_lines(capsys)
    expected = ["first failure: node1 (node rank 1): rank 1"] if stopped else []
    assert [ln[len("torchrun_jsc: ") :][:42] for ln in lines] == expected
    assert exits == []


def test_every_action_has_its_owner() -> None:
    """Each action :func:`~torchrun_jsc.runtime.watch.machine.decide` can return has exactly one
    handler in the session's table, and the table holds nothing else (the monitor's answer is
    read in torch's thread instead)."""
    from typing import get_args

    from torchrun_jsc.runtime.session.adapter import HANDLERS
    from torchrun_jsc.runtime.watch.vocabulary import Action, Answer

    actions = [action for action in get_args(Action) if action is not Answer]
    assert sorted(HANDLERS, key=str) == sorted(actions, key=str)
    assert all(callable(handler) for handler in HANDLERS.values())
    assert len(set(HANDLERS.values())) == len(HANDLERS), "one handler per action"
    assert all(h.__name__ == f"_do_{t.__name__}" for t, h in HANDLERS.items()), "each its own"


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
    from torchrun_jsc.runtime.session.threads import Watchdog
    from torchrun_jsc.runtime.watch.vocabulary import StoreQuiet

    store = FakeStore()
    store.busy_for = 42.0
    closing = threading.Event()
    seen: List[Any] = []

    def post(event: Any) -> None:
        seen.append(event)
        closing.set()

    Watchdog(JobProtocol(store), post, closing).run()
    [event] = seen
    assert isinstance(event, StoreQuiet) and event.stuck == 42.0 and event.silent >= 0.0


def _wait_once(monkeypatch: pytest.MonkeyPatch, before: float, after: float) -> List[object]:
    """One heartbeat wait of 2.5 s (peer timeout 10 s) that the clock sees from ``before`` to
    ``after``; what it posted."""
    from torchrun_jsc.runtime.session import threads

    protocol = JobProtocol(FakeStore())
    clock = iter([before, after])
    monkeypatch.setattr(threads.time, "monotonic", lambda: next(clock, after))
    posted: List[object] = []
    closing = threading.Event()
    beats = Heartbeats(
        protocol,
        10.0,
        posted.append,
        lambda: None,
        lambda: Round("a", ["a"], serving=False, restarts_left=False),
        closing,
    )
    monkeypatch.setattr(closing, "wait", lambda seconds: False)
    beats._wait(2.5)
    return posted


def test_a_heartbeat_wait_that_took_the_peer_timeout_longer_says_this_node_did_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thawed: the heartbeat thread may wake before the watchdog and find a stop; the pause is
    posted first, so the node says why whichever thread wakes first."""
    from torchrun_jsc.runtime.watch.vocabulary import StoreQuiet

    [event] = _wait_once(monkeypatch, 0.0, 100.0)
    assert isinstance(event, StoreQuiet) and event.paused == 100.0 - 2.5


def test_a_long_store_operation_is_no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before torch 2.1 a store operation on a frozen host returns after its timeout: that is
    the watchdog's (the host is lost), not a node that did not run."""
    assert _wait_once(monkeypatch, 50.0, 52.5) == []  # the wait itself took what it was asked


def test_the_end_of_a_thawed_agent_says_it_did_not_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's main thread may end the agent (its store connection broken) before either
    watch thread has looked again after the thaw: the end itself notices the pause."""
    from torchrun_jsc.runtime.session.threads import Watchdog

    session = new_session(peer_timeout=10.0)
    with_store(session)
    session.state = State(Phase.TRAINING)
    assert session.protocol is not None
    session.watchdog = Watchdog(session.protocol, session.post, session.closing)
    session.watchdog.last -= 95.0  # its last look, before the freeze
    monkeypatch.setattr("os._exit", lambda code: None)
    monkeypatch.setattr(session.workers, "stop_all", lambda grace: 0)
    session.at_exit()
    assert session.state.phase == Phase.STOPPING and session.state.exiting
    lines = err_lines(capsys)
    assert lines[0].startswith("torchrun_jsc: this node did not run for 94 s"), lines
    assert lines[-1].startswith("torchrun_jsc: first failure: this node, node0 (node rank 0),")


def test_a_thawed_node_told_to_stop_says_first_that_it_did_not_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Thawed inside a heartbeat (a store call when the freeze came): the beat returns the
    others' stop before either thread has waited again; the stop is their answer to this
    node's pause, so the pause is what this node says."""
    from torchrun_jsc.runtime.session.threads import Watchdog

    session = new_session(2, peer_timeout=10.0)
    with_store(session)
    session.state = State(Phase.TRAINING)
    assert session.protocol is not None
    session.watchdog = Watchdog(session.protocol, session.post, session.closing)
    session.watchdog.last -= 95.0
    started: List[str] = []
    monkeypatch.setattr(session, "_thread", lambda target, name: started.append(name))
    session._told_to_stop()
    lines = err_lines(capsys)
    assert lines[0].startswith("torchrun_jsc: this node did not run for 94 s"), lines
    assert not any("stopped the job;" in ln for ln in lines), lines
    assert started == ["trjsc-stop"] and session.state.phase == Phase.STOPPING


def test_the_watchdog_keeps_the_pause_until_its_look_is_decided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread asking during the watchdog's post (thawed, it found a stop) still sees
    the pause; the next look starts from this one."""
    from torchrun_jsc.runtime.session.threads import Watchdog

    session = new_session(peer_timeout=10.0)
    with_store(session)
    assert session.protocol is not None
    seen: List[float] = []
    dog = Watchdog(session.protocol, lambda event: seen.append(dog.paused()), session.closing)
    dog.last -= 50.0
    looks = iter([False, True])
    monkeypatch.setattr(session.closing, "wait", lambda seconds: next(looks))
    dog.run()
    assert seen and seen[0] >= 48.0, seen
    assert dog.paused() < 1.0


def test_the_requeue_after_a_failure_hears_of_the_nodes_that_left_earlier_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Their loss wrote no record (the job went on): the session names them to the requeue,
    by their Slurm names; a member that never said who it is has no Slurm name."""
    heard: List[Tuple[object, List[str]]] = []

    class Requeue:
        def after_failure(self, records: object, departed: List[str], minority: bool) -> None:
            heard.append((records, departed))

    session = new_session(node_rank=0)
    session.requeue = Requeue()  # type: ignore[assignment]
    left = (Member("node3.cluster", 3), Member("10.0.0.9_7_0"))
    session.state = State(phase=Phase.STOPPING, failed=True, departed=left)
    session.print_last_line()
    assert heard == [(session.last_line.seen, ["node3"])]


def test_a_stop_signal_at_the_end_of_the_process_does_not_cut_the_last_line_short() -> None:
    """Slurm's SIGTERM after another node requeued the job can come while a thawed node prints
    its last line: from the process's end on, the stop-signal handler no longer raises."""
    session = new_session(node_rank=1)
    assert not session.stops.held()
    session.at_exit()
    assert session.stops.held()


@pytest.mark.parametrize(
    ("phase", "held"),
    [(Phase.STOPPING, True), (Phase.LEAVING, True), (Phase.RESTARTING, False)],
)
def test_a_round_that_forms_while_this_node_ends_the_job_gets_no_workers(
    monkeypatch: pytest.MonkeyPatch, phase: Phase, held: bool
) -> None:
    """A restart's rendezvous may complete (torch's own minimum) after the watch decided that
    this node may not go on: torch's main thread waits for the stop to end the process instead
    of starting workers a moment before it ends (torch 2.0.1 left one to the orphan watcher)."""
    import types

    from torchrun_jsc.runtime.session import adapter

    session = new_session(peer_timeout=10.0)
    session.state = State(phase)
    slept: List[float] = []
    ended: List[int] = []
    monkeypatch.setattr(adapter.time, "sleep", slept.append)
    monkeypatch.setattr(adapter, "exit_now", ended.append)
    monkeypatch.setattr(session, "_connect", lambda: None)
    session.after_rendezvous(object(), types.SimpleNamespace(group_rank=0))
    if held:
        assert ended == [1] and slept and slept[0] >= 10.0
    else:
        assert ended == [] and slept == []


@pytest.mark.parametrize(("failed", "silenced"), [(True, 1), (False, 0)])
def test_after_the_last_line_the_teardown_is_silenced(
    monkeypatch: pytest.MonkeyPatch, failed: bool, silenced: int
) -> None:
    """torch's C++ warnings while the interpreter tears down its store (``sendBytes failed``)
    came after the last line in CI; a job that did not fail keeps everything."""
    from torchrun_jsc.runtime.session import ending

    calls: List[int] = []
    monkeypatch.setattr(ending, "silence_teardown", lambda: calls.append(1))
    monkeypatch.setattr("os._exit", lambda code: None)
    session = new_session(peer_timeout=0.0)
    session.state = State(Phase.TRAINING, failed=failed)
    monkeypatch.setattr(session.ending, "print_last_line", lambda: None)
    session.at_exit()
    assert len(calls) == silenced


def test_the_teardown_is_silenced_before_the_watch_threads_are_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watch thread whose store call fails while it is being joined prints torch's C++
    warning; that came after the last line (CI, a thawed node): silenced first, joined after."""
    from torchrun_jsc.runtime.session import ending

    order: List[str] = []
    monkeypatch.setattr(ending, "silence_teardown", lambda: order.append("silenced"))
    session = new_session(peer_timeout=0.0)
    session.state = State(Phase.TRAINING, failed=True)
    monkeypatch.setattr(session.ending, "print_last_line", lambda: order.append("last line"))

    class Joined(threading.Thread):
        def join(self, timeout: Optional[float] = None) -> None:
            order.append("joined")

    session.threads.append(Joined())
    session.at_exit()
    assert order == ["last line", "silenced", "joined"]
