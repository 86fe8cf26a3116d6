"""The agent's own lines on stderr, one style for every message of the runtime."""

from __future__ import annotations

import contextlib


def say(line: str) -> None:
    """Print one line on stderr (never raises)."""
    import sys

    with contextlib.suppress(Exception):  # a closed stderr must not break the watch
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
