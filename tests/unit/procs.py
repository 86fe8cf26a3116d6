"""Processes as /proc shows them, for the unit tests that start real ones."""

from __future__ import annotations

from pathlib import Path
from typing import List


def children(pid: int) -> List[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found
