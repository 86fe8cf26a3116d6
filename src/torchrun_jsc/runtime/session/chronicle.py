"""The job's event log as this agent keeps it (:class:`Chronicle`, which the session holds):
written only while this agent serves the store (the rendezvous host; after a handover the next
host goes on with the same file), the launch first, each round with its members by name, and at
the end the run's summary line."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .. import timing
from ..events import entry, torch_events
from ..events.account import account, summary_line
from ..events.entry import END, LAUNCH, Entry, LogTarget
from ..events.log import EventLog
from ..processes.output import say
from ..store.bounded import bounded
from ..store.protocol import JobProtocol


class Chronicle:
    """The event log of one agent process (None ``target``: no file), and the same events
    given to torch's events handler ``handler()`` names (None or ``null``: none)."""

    def __init__(
        self,
        target: Optional[LogTarget],
        node: str,
        handler: Callable[[], Optional[str]] = lambda: None,
    ) -> None:
        self.target = target
        self.node = node
        self.handler = handler
        self.log: Optional[EventLog] = None
        self._ended = False
        self._lock = threading.Lock()
        self._torch: Optional[str] = None

    def write(self, event: str, fields: Mapping[str, Any], writes: bool) -> None:
        """Log ``event`` where this agent writes the log (a field may be asked for later)."""
        if not writes:
            return
        with self._lock:
            log = self._open()
            if log is not None:
                log.write(event, **fields)

    def flush(self) -> None:
        """Write what is queued (at most :data:`~..timing.EVENTS_WAIT` seconds): the process
        may end next."""
        log = self.log
        if log is not None:
            log.close(timing.EVENTS_WAIT)

    def _open(self) -> Optional[EventLog]:
        """The writer, made at the first event (None: neither a file nor torch's handler)."""
        if self.log is None:
            target, handler = self.target, self.handler()
            self._torch = handler if handler and handler != "null" else None
            if target is None and self._torch is None:
                return None
            forward = self._forward if self._torch is not None else None
            if target is None:
                self.log = EventLog("", node=self.node, forward=forward)
            else:
                self.log = EventLog(target.path, target.job, target.run, self.node, forward=forward)
                self.log.write(LAUNCH, **dict(target.launch))
        return self.log

    def _forward(self, event: Entry) -> None:
        """One event to torch's handler; the first refusal is said, and ends the forwarding."""
        handler = self._torch
        if handler is None:
            return
        why = torch_events.record(event, handler)
        if why is not None:
            self._torch = None
            say(
                f"torchrun_jsc: event log: torch's events handler {handler!r} refused an event"
                f" ({why}); no more events are given to it"
            )

    def end(self, exit_code: int, outcome: str) -> None:
        """Log the end and print the run's summary line (once; nothing where this agent wrote
        no event). What comes after (the requeue) is still written."""
        with self._lock:
            log = self.log
            if log is None or self._ended:
                return
            log.write(END, exit_code=exit_code, outcome=outcome)
            self._ended = True
        log.close(timing.EVENTS_WAIT)
        entries = self._this_run(log) if log.path else []
        if entries:
            say(summary_line(account(entries)))

    def _this_run(self, log: EventLog) -> List[Entry]:
        """This run's entries: the file's (a host before a handover wrote some), else those
        this agent wrote."""
        found: List[Entry] = []

        def read() -> None:
            with open(log.path, encoding="utf-8", errors="replace") as file:
                lines = file.read().splitlines()
            found.extend(
                e for e in entry.read(lines).entries if (e.job, e.run) == (log.job, log.run)
            )

        if not log.failed:
            reader = threading.Thread(target=_quietly(read), daemon=True, name="trjsc-events")
            reader.start()
            reader.join(timing.EVENTS_WAIT)
            if not reader.is_alive() and found:
                return found
        return list(log.entries)


def _quietly(target: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with contextlib.suppress(OSError, ValueError):  # unreadable: the entries in memory
            target()

    return run


def member_names(
    protocol: JobProtocol, keys: Sequence[str], wait: float = timing.NAMES_WAIT
) -> List[Dict[str, Any]]:
    """The members ``keys`` by name, in node-rank order, once each has said who it is (at most
    ``wait`` seconds; a member that has not is named by its key)."""
    deadline = time.monotonic() + wait
    names: Dict[str, Dict[str, Any]] = {}
    while True:
        for key in keys:
            if key not in names:
                who = bounded(functools.partial(protocol.who, key), timing.HANG)
                if who is not None and who.hostname:
                    names[key] = entry.node(who.hostname, who.node_rank)
        if len(names) == len(keys) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    found = [names.get(k, entry.node(k, None)) for k in keys]
    return sorted(found, key=lambda n: (n["node_rank"] is None, n["node_rank"] or 0, n["name"]))
