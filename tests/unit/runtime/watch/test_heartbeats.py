"""Heartbeat bookkeeping: who is alive, and when the rendezvous host is lost (pure)."""

from __future__ import annotations

import pytest

from torchrun_jsc.runtime.watch import heartbeats
from torchrun_jsc.runtime.watch.heartbeats import Tracker
from torchrun_jsc.runtime.watch.vocabulary import Config


def test_tracker_declares_a_quiet_member_lost_after_the_timeout() -> None:
    t = Tracker(peer_timeout=60)
    t.members(["a", "b"], now=0)
    assert t.observe({"a": 1, "b": 1}, now=5) == []
    for second in range(10, 65, 5):
        assert t.observe({"a": second, "b": 1}, now=second) == []
    assert t.observe({"a": 70, "b": 1}, now=66) == ["b"]
    assert t.quiet_for("b", 66) == 61


def test_tracker_a_paused_watcher_raises_no_false_alarm() -> None:
    """The watcher itself frozen for 5 minutes: every live counter moved on meanwhile."""
    t = Tracker(peer_timeout=60)
    t.members(["a", "b"], now=0)
    t.observe({"a": 1, "b": 1}, now=1)
    assert t.observe({"a": 61, "b": 58}, now=301) == []


def test_tracker_finished_members_may_go_quiet() -> None:
    t = Tracker(peer_timeout=10)
    t.members(["a", "b"], now=0)
    t.finished("b")
    assert t.observe({"a": 5, "b": 1}, now=100) == []


def test_tracker_new_round_keeps_history_and_starts_newcomers_now() -> None:
    t = Tracker(peer_timeout=10)
    t.members(["a", "b"], now=0)
    t.members(["a", "c"], now=8)
    assert t.observe({"a": 1, "c": None}, now=12) == []  # c: new, counted from 8
    assert t.observe({"a": 2, "c": None}, now=18) == ["c"]


def test_interval() -> None:
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


@pytest.mark.parametrize(
    ("timeout", "interval"), [(0.0, 0.0), (8.0, 2.0), (20.0, 5.0), (60.0, 5.0)]
)
def test_the_watchs_configuration_says_its_beat_interval(timeout: float, interval: float) -> None:
    """One home for the beat interval: the configuration's, from its peer timeout."""
    assert Config(peer_timeout=timeout).beat_interval == interval
