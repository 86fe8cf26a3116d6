"""The cluster scenarios' crash-dump extract (tests/cluster/system.py), on texts."""

from __future__ import annotations

import pytest

from tests.cluster.system import crash_dump

HEADER = "Fatal Python error: Segmentation fault\n"
OTHER = """\
Thread 0x00007fb5fb1fb6c0 (most recent call first):
  File "/x/early_stop.py", line 206 in _read
  File "/x/threading.py", line 975 in run
"""
CRASHED = """\
Current thread 0x00007fb5aa000000 (most recent call first):
  File "/x/dynamic_rendezvous.py", line 43 in get_method_name
  File "/x/threading.py", line 995 in _bootstrap
"""
MAIN = """\
Thread 0x00007fb5fb8c8040 (most recent call first):
  File "/x/api.py", line 850 in _invoke_run
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("a line\nanother\n", ""),
        # the crashed thread among others: the header and its stack only
        (
            "before\n" + HEADER + "\n" + OTHER + "\n" + CRASHED + "\n" + MAIN + "after\n",
            HEADER + "\n" + CRASHED.rstrip("\n"),
        ),
        ("before\n" + HEADER + "\n" + CRASHED + "\n" + MAIN, HEADER + "\n" + CRASHED.rstrip("\n")),
        # no thread marked current: the header and what follows
        (HEADER + "\n" + OTHER, HEADER + "\n" + OTHER.rstrip("\n")),
    ],
)
def test_the_dump_keeps_the_header_and_the_crashed_thread(text: str, expected: str) -> None:
    assert crash_dump(text) == expected


def test_at_most_the_given_lines() -> None:
    text = HEADER + "\n" + OTHER + "\n" + CRASHED
    got = crash_dump(text, lines=3).splitlines()
    assert got == ["Fatal Python error: Segmentation fault", "", CRASHED.splitlines()[0]]
