"""Processes as /proc shows them, for the unit tests that start real ones."""

from __future__ import annotations

import signal
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


def stop_signals_default() -> None:
    """As at an interactive shell (a ``preexec_fn``): a test session started in the
    background, or under ``nohup``, hands its children SIGINT or SIGHUP ignored, which they
    would keep (an ignored stop signal stays ignored); the tests send them."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
