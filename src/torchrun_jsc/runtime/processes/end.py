"""The agent process's immediate end, from any thread (torch's main thread may be blocked)."""

from __future__ import annotations

import contextlib
import os
import sys


def exit_now(code: int) -> None:
    """End the process with ``code`` at once, its output flushed first."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
