"""The event log's writer on the rendezvous host: events are queued by the job watch and
appended to the file by a thread of their own, so that a slow or refusing file system never
holds the watch up; a file that cannot be written costs one line on stderr, never the job."""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, List, Optional

from ..processes.output import say
from .entry import Entry, encode

#: A field whose value the writer's thread asks for just before it writes the line (it may
#: wait, e.g. for the members of a round to say who they are).
Later = Callable[[], Any]


class EventLog:
    """Appends the events of one agent process to ``path`` (one writer at a time: the
    rendezvous host), and keeps them for the run's summary."""

    def __init__(
        self,
        path: str,
        job: str = "",
        run: int = 0,
        node: str = "",
        clock: Callable[[], float] = time.time,
        forward: Optional[Callable[[Entry], None]] = None,
    ) -> None:
        #: The file ("": none; the events are only forwarded and kept).
        self.path = path
        self.job = job
        self.run = run
        self.node = node
        self.clock = clock
        #: Called with every entry as it is written (its fields known), from the writer's
        #: thread: torch's events API.
        self.forward = forward
        #: The entries written (or dropped after a failed write), in order.
        self.entries: List[Entry] = []
        self.failed = False
        self._queue: queue.Queue[Optional[Entry]] = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        """Queue ``event`` with its own ``fields`` (a :data:`Later` is asked for at the write),
        stamped now."""
        entry = Entry(self.clock(), event, self.job, self.run, self.node, fields)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="trjsc-events")
                self._thread.start()
        self._queue.put(entry)

    def close(self, wait: float) -> bool:
        """Write what is queued, waiting at most ``wait`` seconds; whether all was written (a
        later :meth:`write` starts the writer again)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return True
            self._queue.put(None)
        thread.join(wait)
        with self._lock:
            if thread.is_alive():
                return False
            if self._thread is thread:
                self._thread = None
        return True

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            fields = {k: v() if callable(v) else v for k, v in entry.fields.items()}
            entry = entry._replace(fields=fields)
            self.entries.append(entry)
            if self.forward is not None:
                self.forward(entry)
            if self.path and not self.failed:
                self._append(encode(entry) + "\n")

    def _append(self, line: str) -> None:
        """One line at the end of the file (one write of an ``O_APPEND`` descriptor)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            self.failed = True
            say(
                f"torchrun_jsc: event log: cannot write {self.path} ({exc.strerror or exc});"
                " the job goes on without it"
            )
