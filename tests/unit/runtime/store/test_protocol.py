"""The job watch's store protocol: verbs against the one fake store, and its encodings."""

from __future__ import annotations

import pytest

from tests.unit.fakestore import FakeStore
from torchrun_jsc.runtime.records.report import FAILED, LOST, STOPPED, Record
from torchrun_jsc.runtime.store import protocol as module
from torchrun_jsc.runtime.store.protocol import Beat, JobProtocol, Who


def _p() -> JobProtocol:
    return JobProtocol(FakeStore())


@pytest.mark.parametrize(
    "value, beat",
    [
        (0, Beat(0)),
        (7, Beat(7)),
        ((1 << 39) + 7, Beat(7, done=True)),
        ((1 << 40), Beat(0, stop=True)),
        ((1 << 40) + (1 << 39) + 3, Beat((1 << 39) + 3, stop=True)),  # done after a stop
    ],
)
def test_counter_encoding(value: int, beat: Beat) -> None:
    assert module.decode(value) == beat


def test_beats_count_up_and_a_watcher_reads_them() -> None:
    p = _p()
    p.watch(["a", "b"])
    assert p.beat("a") == Beat(1) and p.beat("a") == Beat(2)
    assert p.beats(["a", "b"]) == {"a": Beat(2), "b": Beat(0)}


def test_watching_twice_keeps_the_counters() -> None:
    p = _p()
    p.beat("a")
    p.watch(["a"])
    assert p.beats(["a"]) == {"a": Beat(1)}


def test_a_counter_that_is_not_a_number_reads_as_none() -> None:
    p = _p()
    p.watch(["a"])
    assert isinstance(p.store, FakeStore)
    p.store.values["hb/a"] = "garbage"
    assert p.beats(["a"]) == {"a": None}


def test_done_then_quiet_and_a_stop_told_before_done_stays() -> None:
    p = _p()
    p.beat("a")
    assert p.mark_done("a") == Beat(1, done=True)
    cause = Record(kind=FAILED, hostname="node1", node_rank=1, rank=1, exitcode=3)
    p.tell_stop(cause, ["b"])
    assert p.beat("b").stop
    assert p.mark_done("b").stop  # an add: the stop written before stays one
    assert not p.beat("a").stop  # the one telling is not told


def test_the_first_cause_of_a_stop_wins() -> None:
    p = _p()
    assert p.stop_cause() is None and not p.stopped()
    first = Record(kind=LOST, hostname="node3", node_rank=3)
    p.tell_stop(first, [])
    p.tell_stop(Record(kind=FAILED, hostname="node1"), [])
    assert p.stop_cause() == first and p.stopped()


def test_who_is_who() -> None:
    p = _p()
    assert p.who("a") is None
    p.introduce("a", "node2", 2)
    p.introduce("a", "other", 9)  # the first word stays
    assert p.who("a") == Who("node2", 2)
    assert isinstance(p.store, FakeStore)
    p.store.values["who/b"] = "{not json"
    p.store.values["who/c"] = '{"hostname": 3}'
    assert p.who("b") is None and p.who("c") is None


def test_records_in_slots_and_their_readers() -> None:
    p = _p()
    failed = Record(kind=FAILED, hostname="node1", rank=1, exitcode=3, ranks_ended=1)
    slot = p.write_record(Record(kind=STOPPED, hostname="node1", ranks_ended=1))
    assert p.write_record(failed, slot) == slot  # the node's one slot, replaced
    p.write_record(Record(kind=STOPPED, hostname="node0", ranks_ended=2))
    assert p.record_count() == 2
    assert [r.kind for r in p.records(2)] == [FAILED, STOPPED]
    p.mark_read()
    p.mark_read()
    assert p.readers() == 2


def test_every_key_lives_under_the_protocol() -> None:
    """The watch's other modules name no key: what they write goes through the verbs."""
    from pathlib import Path

    runtime = Path(module.__file__).parents[1]
    store = runtime / "store"
    for path in runtime.rglob("*.py"):
        if path in (store / "protocol.py", store / "connection.py"):
            continue
        if path == runtime / "events" / "entry.py":
            continue  # the event log's names ("stop" among them) are no store keys
        text = path.read_text()
        for key in ('"hb/', '"who/', '"fail/', '"stop"', 'f"hb/', 'f"fail/'):
            assert key not in text, f"{path.name} names the store key {key}"
