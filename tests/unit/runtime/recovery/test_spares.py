"""Recovery's store verbs, the spare's look, the watcher's count of live spares, and the
restart count a session derives from torch's round numbers: on the one fake store."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, List

from tests.unit.fakestore import FakeStore, protocol
from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.recovery.spares import SpareLook
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.session.threads import Heartbeats, Round
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import (
    AwaitSpares,
    Config,
    EndSpare,
    Event,
    Joined,
    Member,
    MembersLost,
    Phase,
    SetRestarts,
    SpareFound,
    SpareReleased,
    State,
)


def test_rounds_first_round_spares_and_the_end_round_trip() -> None:
    p = protocol()
    assert p.latest_round() is None and not p.completed() and p.spares() == []
    p.publish_round(7, ["a", "b"])
    assert p.latest_round() == (7, ("a", "b"))
    assert p.first_round(7) == 7 and p.first_round(9) == 7  # the first word stays
    p.add_spare("s1")
    p.add_spare("s2")
    assert p.spares() == ["s1", "s2"]
    p.mark_completed()
    assert p.completed()


def test_every_node_reads_the_same_spares_for_a_round() -> None:
    """The first node to ask fixes a round's spares (those registered and not in it); a spare
    registered later changes nothing for that round, and a later round counts it."""
    p = protocol()
    p.add_spare("s1")
    p.add_spare("m2")  # a spare that joined this round: a member, not a spare
    assert p.round_spares(5, ["m1", "m2"]) == ("s1",)
    p.add_spare("s3")
    assert p.round_spares(5, ["m1", "m2"]) == ("s1",)
    assert p.round_spares(6, ["m1", "m2"]) == ("s1", "s3")


def test_a_round_record_that_is_not_ours_reads_as_none() -> None:
    p = protocol()
    store: Any = p.store
    store.values["round"] = '{"round": "x", "members": []}'
    assert p.latest_round() is None
    store.values["round"] = "not json"
    assert p.latest_round() is None


def _look(p: JobProtocol, me: str, phase: Phase) -> List[Event]:
    posted: List[Event] = []
    look = SpareLook(p, me, lambda: phase, posted.append, threading.Event(), 0.01)
    if phase == Phase.WAITING:
        look._look_for_round()
    else:
        look._look_for_end()
    return posted


def test_a_node_missing_from_the_published_round_is_a_spare() -> None:
    p = protocol()
    assert _look(p, "me", Phase.WAITING) == []  # no round yet
    p.publish_round(0, ["a", "b", "me"])
    assert _look(p, "me", Phase.WAITING) == []  # a member
    p.publish_round(0, ["a", "b", "c"])
    assert _look(p, "me", Phase.WAITING) == [SpareFound(size=3)]


def test_a_spare_learns_how_the_job_ended() -> None:
    p = protocol()
    assert _look(p, "me", Phase.SPARE) == []
    p.mark_completed()
    assert _look(p, "me", Phase.SPARE) == [SpareReleased(completed=True)]
    store: Any = p.store
    store.values["stop"] = "{}"  # a stop outranks a completion noted by a node that finished
    assert _look(p, "me", Phase.SPARE) == [SpareReleased(completed=False)]


def test_the_look_ends_once_the_node_joined() -> None:
    p = protocol()
    look = SpareLook(p, "me", lambda: Phase.TRAINING, lambda e: None, threading.Event(), 0)
    done = threading.Thread(target=look.run)
    done.start()
    done.join(2.0)
    assert not done.is_alive()


def test_the_watcher_counts_only_spares_that_beat() -> None:
    p = protocol()
    posted: List[Event] = []
    beats = Heartbeats(p, 10.0, posted.append, lambda: None, lambda: None, threading.Event())  # type: ignore[arg-type,return-value]
    p.beat("s1")
    p.add_spare("s1")
    p.add_spare("m1")  # a spare that has joined the round since: a member now
    assert beats._live_spares(["m1", "me"]) == 1 and beats.waiting == ("s1",)
    tracker = beats.spare_tracker
    tracker._changed["s1"] -= 11.0  # quiet for longer than the peer timeout
    assert beats._live_spares(["m1", "me"]) == 0 and beats.waiting == ()
    p.beat("s1")
    assert beats._live_spares(["m1", "me"]) == 1


def test_a_loss_reports_the_round_size_and_the_live_spares() -> None:
    p = protocol()
    posted: List[Event] = []
    current = Round("me", ["k1", "k2", "me"], True, True, recovery=True)
    beats = Heartbeats(p, 10.0, posted.append, lambda: None, lambda: current, threading.Event())
    p.beat("s1")
    p.add_spare("s1")
    beats._scan(current)
    beats.tracker._changed["k2"] -= 11.0
    p.beat("s1")
    beats._scan(current)
    (event,) = posted
    assert isinstance(event, MembersLost)
    assert event.keys == ("k2",) and event.members == 3 and event.spares == 1
    # s1 registered after the round formed: it may take a place, but the job had no spare
    assert (event.known, event.known_live) == (0, 0)


def test_a_loss_counts_the_live_spares_of_those_the_job_had_when_the_round_formed() -> None:
    p = protocol()
    posted: List[Event] = []
    current = Round("me", ["k1", "me"], True, True, recovery=True, spares=("s1", "s2"))
    beats = Heartbeats(p, 10.0, posted.append, lambda: None, lambda: current, threading.Event())
    for spare in ("s1", "s2", "s3"):
        p.beat(spare)
        p.add_spare(spare)
    beats._scan(current)
    beats.tracker._changed["k1"] -= 11.0
    beats.spare_tracker._changed["s2"] -= 11.0  # cut off with k1
    for spare in ("s1", "s3"):
        p.beat(spare)
    beats._scan(current)
    (event,) = posted
    assert isinstance(event, MembersLost)
    assert (event.spares, event.known, event.known_live) == (2, 2, 1)


def test_members_lost_one_scan_apart_are_counted_together_until_the_next_round() -> None:
    """A loss found one scan after an earlier one of the same round carries the earlier ones
    (``gone``): the majority rule judges the round's whole loss, not each event alone."""
    p = protocol()
    posted: List[Event] = []
    current = Round("me", ["k1", "k2", "k3", "me"], True, True, recovery=True)
    beats = Heartbeats(p, 10.0, posted.append, lambda: None, lambda: current, threading.Event())
    beats._scan(current)
    beats.tracker._changed["k1"] -= 11.0
    beats._scan(current)
    beats.rewatch(posted[-1].keys)  # type: ignore[union-attr]
    beats.tracker._changed["k2"] -= 11.0
    beats._scan(current)
    first, second = posted
    assert isinstance(first, MembersLost) and isinstance(second, MembersLost)
    beats.rewatch(second.keys)
    assert (first.keys, first.gone) == (("k1",), 0)
    assert (second.keys, second.members, second.gone) == (("k2",), 4, 1)
    current = Round("me", ["k2", "k3", "me"], True, True, recovery=True)  # the next round
    beats._scan(current)
    beats.tracker._changed["k3"] -= 11.0
    beats._scan(current)
    assert isinstance(posted[-1], MembersLost)
    assert (posted[-1].keys, posted[-1].members, posted[-1].gone) == (("k3",), 3, 0)


def _session(store: FakeStore, serving: bool) -> Session:
    session = Session(
        Config(
            hostname="node1",
            node_rank=1,
            is_host=serving,
            run_id="r",
            peer_timeout=10.0,
            report=True,
            recovery=True,
            min_nodes=3,
            max_restarts=3,
        ),
        Workers(),
    )
    session.protocol = JobProtocol(store)
    session.ledger.protocol = session.protocol
    return session


def test_restarts_count_from_the_jobs_first_round_on_every_node() -> None:
    store = FakeStore()
    host, spare = _session(store, True), _session(store, False)
    JobProtocol(store).introduce("k3", "node3", 3)
    JobProtocol(store).introduce("k4", "node4", 4)
    host.members = ["k0", "k3"]
    first = host._joined([], 5)
    assert first == Joined(restart=0, size=2)
    JobProtocol(store).add_spare("k4")  # waits for the next round
    assert JobProtocol(store).latest_round() == (5, ("k0", "k3"))
    before, host.members = host.members, ["k0", "k4"]
    again = host._joined(before, 6)
    assert again == Joined(
        restart=1, size=2, left=(Member("node3", 3),), came=(Member("node4", 4),)
    )
    assert host._round().spares == ()  # k4 is a member now
    spare_members = ["k0", "k4"]
    spare.members = spare_members
    assert spare._joined([], 6).restart == 1  # a spare joining later counts the same


def test_a_spare_ends_when_torch_closes_the_rendezvous(monkeypatch: Any) -> None:
    store = FakeStore()
    session = _session(store, False)
    session.state = State(phase=Phase.SPARE)
    codes: List[int] = []
    monkeypatch.setattr("os._exit", codes.append)

    class RendezvousClosedError(Exception):
        pass

    session.rendezvous_failed(ValueError("not a close"))
    assert codes == []
    session.rendezvous_failed(RendezvousClosedError())
    assert codes == [0]  # nothing stopped the job: it completed


def test_a_node_that_is_out_keeps_the_rendezvous_open() -> None:
    session = _session(FakeStore(), False)
    assert session.may_close()
    session.state = session.state._replace(out=True)
    assert not session.may_close()


def test_torchs_budget_is_capped_never_raised() -> None:
    session = _session(FakeStore(), False)
    session.agent = SimpleNamespace(_remaining_restarts=1)
    session._do_SetRestarts(SetRestarts(3))
    assert session.agent._remaining_restarts == 1
    session._do_SetRestarts(SetRestarts(0))
    assert session.agent._remaining_restarts == 0


def test_spares_are_read_once_each_and_a_half_written_slot_next_time() -> None:
    p = protocol()
    p.add_spare("s1")
    store: Any = p.store
    store.values["spare/n"] = "2"  # the second spare took its slot but has not written it yet
    assert p.spares() == ["s1"]
    assert p.spares(1) == []
    store.values["spare/2"] = "s2"
    assert p.spares(1) == ["s2"]
    peeks = store.calls.count("peek")
    posted: List[Event] = []
    beats = Heartbeats(p, 10.0, posted.append, lambda: None, lambda: None, threading.Event())  # type: ignore[arg-type,return-value]
    beats._live_spares([])
    beats._live_spares([])
    assert beats._registered == ["s1", "s2"]
    assert store.calls.count("peek") - peeks == 2  # the second scan reads no slot again


def test_the_host_of_a_completed_job_ends_after_its_waiting_spares(monkeypatch: Any) -> None:
    """A spare that lost the store before it saw the job's end would take the host for lost
    and hand over to nodes that have ended: the host waits for the waiting spares to go first,
    the linger at most."""
    store = FakeStore()
    host, spare = _session(store, True), _session(store, False)
    host.beats = SimpleNamespace(waiting=("s1", "s2"))  # type: ignore[assignment]
    monkeypatch.setattr("torchrun_jsc.runtime.timing.LINGER", 0.6)
    codes: List[int] = []
    monkeypatch.setattr("os._exit", codes.append)
    for me in ("s1", "s2", "x9"):  # x9 had not registered: it ended all the same
        spare.me = me
        spare._do_EndSpare(EndSpare(0))
    assert codes == [0, 0, 0] and JobProtocol(store).spares_left(["s1", "s3"]) == ["s1"]
    started = time.monotonic()
    host._do_AwaitSpares(AwaitSpares())
    assert time.monotonic() - started < 0.5  # both had gone: no wait
    host.beats = SimpleNamespace(waiting=("s1", "s3"))  # type: ignore[assignment]
    host._do_AwaitSpares(AwaitSpares())  # x9's end does not stand in for s3's
    assert time.monotonic() - started >= 0.6  # s3 never went: the linger, no longer
    started = time.monotonic()
    spare.beats = host.beats
    spare._do_AwaitSpares(AwaitSpares())  # only the node that serves the store waits
    assert time.monotonic() - started < 0.5
