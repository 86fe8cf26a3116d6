"""The event log as the session keeps it: only the host writes, the launch first, the rounds'
members by name, the end and the summary line before the last line."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from torchrun_jsc.runtime.events import entry
from torchrun_jsc.runtime.events.entry import Entry, LogTarget
from torchrun_jsc.runtime.session.chronicle import Chronicle, member_names
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import Joined, MembersLost, Phase, State

from ...fakestore import FakeStore
from ...sessions import err_lines, new_session, with_store


def read(path: Path) -> List[Entry]:
    found = entry.read(path.read_text().splitlines())
    assert found.skipped == 0
    return list(found.entries)


def target(path: Path) -> LogTarget:
    return LogTarget(str(path), "4711", 1, 4, (("torch", "2.13.0"), ("nodes", 4)))


def test_only_the_serving_agent_writes(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    chronicle = Chronicle(target(path), "node1")
    chronicle.write("stop", {"cause": "x"}, writes=False)
    chronicle.end(1, "failed")
    assert not path.exists()


def test_the_session_logs_the_launch_the_round_by_name_and_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ev.jsonl"
    session = new_session(0, is_host=True, events=target(path))
    store = with_store(session)
    protocol = JobProtocol(store)
    # members introduce themselves (node1 before node0, in torch's order)
    protocol.introduce("k1", "node1", 1)
    protocol.introduce("k0", "node0", 0)
    session.members = ["k1", "k0"]
    session.post(Joined(size=2))
    session.state = session.state._replace(succeeded=True)
    session.ending.end_chronicle()
    events = read(path)
    assert [e.event for e in events] == ["launch", "round", "end"]
    assert {(e.job, e.run, e.node) for e in events} == {("4711", 1, "node0")}
    assert events[0].get("torch") == "2.13.0"
    assert events[1].get("members") == [
        {"name": "node0", "node_rank": 0},
        {"name": "node1", "node_rank": 1},
    ]
    assert events[1].get("host") == {"name": "node0", "node_rank": 0}
    assert events[2].get("exit_code") == 0
    (line,) = err_lines(capsys)
    assert line.startswith("torchrun_jsc: summary: job 4711 run 1 ran ")
    assert "1 round, 0 restarts; no node lost; requeues so far 1" in line
    session.close()


def test_a_lost_node_is_logged_by_the_watcher(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    session = new_session(0, peer_timeout=10.0, is_host=True, events=target(path))
    # the stop's thread (it ends the workers, then prints the last line) must print nothing
    # into a later test: no report, and the process counts as ending already
    session.config = session.config._replace(report=False)
    with_store(session)
    session.state = State(phase=Phase.TRAINING)
    session.post(MembersLost(("k3",), "node3", 3, 11.0, 1000.0, False))
    session.state = session.state._replace(exiting=True)  # before the stop's thread looks
    session.ending.end_chronicle()
    events = read(path)
    assert [e.event for e in events] == ["launch", "lost", "stop", "end"]
    assert events[1].get("lost") == {"name": "node3", "node_rank": 3}
    assert events[3].get("exit_code") == 1
    session.close()


def test_a_member_that_never_says_who_it_is_is_named_by_its_key() -> None:
    protocol = JobProtocol(FakeStore())
    protocol.introduce("k0", "node0", 0)
    assert member_names(protocol, ["kX", "k0"], wait=0.0) == [
        {"name": "node0", "node_rank": 0},
        {"name": "kX", "node_rank": None},
    ]


def test_the_summary_reads_what_an_earlier_host_of_the_run_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a handover the next host's summary counts the whole run."""
    path = tmp_path / "ev.jsonl"
    earlier = entry.Entry(1000.0, "round", "4711", 1, "node0", {"restart": 0, "size": 4})
    other_run = entry.Entry(900.0, "round", "4711", 0, "node0", {"restart": 0, "size": 4})
    path.write_text(f"{entry.encode(other_run)}\n{entry.encode(earlier)}\n")
    chronicle = Chronicle(target(path), "node1")
    chronicle.write("handover", {"lost": "the host", "restart": 1}, writes=True)
    chronicle.write("round", {"restart": 1, "size": 3}, writes=True)
    chronicle.end(0, "succeeded")
    (line,) = err_lines(capsys)
    assert "2 rounds, 1 restart; lost the rendezvous host: 1 handover;" in line
    assert "no node lost" not in line


class Kept(logging.Handler):
    """A handler registered with torch's events, as a user's would be (under a name of its
    own: torch keeps a logger per name)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from torch.distributed.elastic.events import handlers

        super().__init__()
        self.seen: List[Dict[str, Any]] = []
        self.name = f"trjsc-kept-{uuid.uuid4().hex}"
        monkeypatch.setitem(handlers._log_handlers, self.name, self)

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(json.loads(record.getMessage()))


def test_torchs_events_handler_sees_the_same_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = Kept(monkeypatch)
    path = tmp_path / "ev.jsonl"
    chronicle = Chronicle(target(path), "node0", lambda: kept.name)
    lost = {"lost": entry.node("node3", 3), "quiet": 10.5, "next": "stop"}
    chronicle.write("lost", lost, writes=True)
    chronicle.end(1, "failed")
    assert [e["name"] for e in kept.seen] == [
        "torchrun_jsc.launch",
        "torchrun_jsc.lost",
        "torchrun_jsc.end",
    ]
    event = kept.seen[1]
    assert event["source"] == "AGENT"
    assert event["metadata"] == {
        "job": "4711",
        "run": 1,
        "node": "node0",
        "lost": '{"name":"node3","node_rank":3}',
        "quiet": 10.5,
        "next": "stop",
    }
    written = read(path)
    assert event["timestamp"] == int(written[1].time * 1000)


def test_without_a_file_torchs_handler_still_gets_them_and_no_summary_is_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = Kept(monkeypatch)
    chronicle = Chronicle(None, "node0", lambda: kept.name)
    chronicle.write("stop", {"cause": "x"}, writes=True)
    chronicle.end(1, "failed")
    assert [e["name"] for e in kept.seen] == ["torchrun_jsc.stop", "torchrun_jsc.end"]
    assert capsys.readouterr().err == ""


def test_a_handler_torch_does_not_know_is_said_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chronicle = Chronicle(None, "node0", lambda: "no-such-handler")
    for _ in range(3):
        chronicle.write("stop", {"cause": "x"}, writes=True)
    chronicle.end(1, "failed")
    (line,) = err_lines(capsys)
    assert line.startswith(
        "torchrun_jsc: event log: torch's events handler 'no-such-handler' refused an event"
        " (KeyError: "
    )
    assert line.endswith("no more events are given to it")


def test_null_is_no_handler() -> None:
    chronicle = Chronicle(None, "node0", lambda: "null")
    chronicle.write("stop", {"cause": "x"}, writes=True)
    assert chronicle.log is None


def test_a_host_outvoted_by_a_partition_writes_nothing_more(tmp_path: Path) -> None:
    """Cut off with too few nodes, the host stops; the others may go on at a next host, which
    writes the log from then on."""
    path = tmp_path / "ev.jsonl"
    config = dict(peer_timeout=10.0, is_host=True, events=target(path), recovery=True)
    session = new_session(0, max_restarts=3, min_nodes=1, elastic=True, **config)
    session.config = session.config._replace(report=False)
    with_store(session)
    session.state = State(phase=Phase.TRAINING)
    session.post(Joined(size=4))
    # three of four quiet at once: the host's group (1 of 4) may not go on
    lost = MembersLost(("k1", "k2", "k3"), "node1", 1, 11.0, 1000.0, True, members=4)
    session.post(lost)
    session.state = session.state._replace(exiting=True)  # before the stop's thread looks
    assert session.state.minority
    session.ending.end_chronicle()  # writes no end here, so it does not wait for the writer
    session.chronicle.flush()  # the lines queued before the loss, written by now
    assert [e.event for e in read(path)] == ["launch", "round"]
    session.close()


def test_a_stop_before_any_worker_is_the_hosts_stop_and_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ev.jsonl"
    line = "torchrun_jsc: stopped by SIGTERM; no worker had started (waiting for 3 s)"
    host = new_session(0, is_host=True, events=target(path))
    host.stopped_early(line, 1)
    events = read(path)
    assert [e.event for e in events] == ["launch", "stop", "end"]
    assert events[1].get("cause") == line.removeprefix("torchrun_jsc: ")
    assert (events[2].get("exit_code"), events[2].get("outcome")) == (1, "failed")
    (summary,) = err_lines(capsys)
    assert "0 rounds, 0 restarts; no node lost" in summary
    host.close()
    other = tmp_path / "other.jsonl"
    node = new_session(1, is_host=False, events=target(other))
    node.stopped_early(line, 1)
    assert not other.exists() and err_lines(capsys) == []
    node.close()
