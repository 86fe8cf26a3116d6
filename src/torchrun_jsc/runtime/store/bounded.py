"""Store calls that may never return (a frozen rendezvous host), run with a bound."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, List

#: The name of every thread :func:`bounded` starts (how :func:`in_flight` finds them).
THREAD_NAME = "trjsc-store"


def bounded(call: Callable[[], Any], seconds: float) -> Any:
    """``call()`` in a daemon thread, waiting at most ``seconds``; None if it did not return
    (a store operation on a lost host never does) or raised."""
    box: List[Any] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            box.append(call())

    worker = threading.Thread(target=run, daemon=True, name=THREAD_NAME)
    worker.start()
    worker.join(seconds)
    return box[0] if box else None


def in_flight() -> List[threading.Thread]:
    """The threads of :func:`bounded` still running (the process's end waits for them)."""
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]
