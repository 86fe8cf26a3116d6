"""The cluster scenarios' crash-dump extract (tests/cluster/system.py), on texts."""

from __future__ import annotations

import pytest

from tests.cluster.system import crash_dump

DUMP = """\
Fatal Python error: Segmentation fault

Current thread 0x00007fb5 (most recent call first):
  File "/x/dynamic_rendezvous.py", line 43 in get_method_name
  File "/x/threading.py", line 995 in _bootstrap"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("a line\nanother\n", ""),
        ("before\n" + DUMP + "\nafter", DUMP + "\nafter"),
        ("0: " + DUMP, "0: " + DUMP),
    ],
)
def test_the_dump_is_cut_from_its_header(text: str, expected: str) -> None:
    assert crash_dump(text) == expected


def test_only_the_first_lines_of_a_long_dump() -> None:
    text = DUMP + "\n" + "\n".join(f"line {i}" for i in range(100))
    got = crash_dump(text, lines=6)
    assert got.splitlines()[0] == "Fatal Python error: Segmentation fault"
    assert got.splitlines()[-1] == "line 0"
    assert len(got.splitlines()) == 6
