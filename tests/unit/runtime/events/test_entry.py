"""The event log's lines: encoding, decoding, and lines that are no event (pure)."""

from __future__ import annotations

import calendar
import json

import pytest

from torchrun_jsc.runtime.events import entry
from torchrun_jsc.runtime.events.entry import EVENTS, Entry

NOON = calendar.timegm((2026, 12, 5, 12, 0, 0))


def test_a_line_has_the_common_keys_first_then_its_own_fields_sorted() -> None:
    e = Entry(NOON + 0.25, "lost", "4711", 2, "node0", {"quiet": 10.5, "detection": "heartbeat"})
    line = entry.encode(e)
    assert line == (
        '{"time":"2026-12-05T12:00:00.250Z","event":"lost","job":"4711","run":2,'
        '"node":"node0","detection":"heartbeat","quiet":10.5}'
    )
    assert "\n" not in line
    assert entry.decode(line) == e


def test_an_own_field_cannot_overwrite_a_common_key() -> None:
    line = entry.encode(Entry(NOON, "stop", "1", 0, "node0", {"event": "end", "cause": "x"}))
    data = json.loads(line)
    assert data["event"] == "stop"
    assert data["cause"] == "x"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-12-05T12:00:00.250Z", NOON + 0.25),
        ("2026-12-05T13:00:00+01:00", NOON),
        ("2026-12-05T12:00:00", NOON),  # no zone: UTC
        ("yesterday", None),
        ("", None),
    ],
)
def test_times_are_iso_8601_in_utc(text: str, seconds: object) -> None:
    assert entry.parse_time(text) == seconds


def test_every_event_says_what_it_means_and_its_fields() -> None:
    assert set(EVENTS) >= {"launch", "round", "lost", "restart", "stop", "end"}
    for name, (meaning, fields) in EVENTS.items():
        assert meaning and fields, name


GOOD = entry.encode(Entry(NOON, "round", "7", 0, "n0", {"restart": 0}))


@pytest.mark.parametrize(
    "line",
    [
        GOOD[: len(GOOD) // 2],  # truncated
        "not json at all",
        "[1, 2]",
        GOOD.replace('"round"', '"party"'),  # an event nobody documented
        GOOD.replace("2026-12-05T12:00:00.000Z", "noon"),
        GOOD.replace('"run":0', '"run":-1'),
        GOOD.replace('"run":0', '"run":true'),
        GOOD.replace('"job":"7"', '"job":7'),
        '{"event":"round"}',  # no time
    ],
)
def test_a_line_that_is_no_event_decodes_to_none(line: str) -> None:
    assert entry.decode(line) is None


def test_read_sorts_by_time_and_counts_the_lines_skipped() -> None:
    later = entry.encode(Entry(NOON + 5, "stop", "7", 0, "n0", {"cause": "c"}))
    earlier = entry.encode(Entry(NOON + 1, "lost", "7", 0, "n0", {}))
    found = entry.read([later, "", "garbage", earlier, GOOD[:10], "   "])
    assert [e.event for e in found.entries] == ["lost", "stop"]
    assert found.skipped == 2
