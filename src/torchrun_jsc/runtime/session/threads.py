"""The job watch's two threads: heartbeats (and, on the node that serves the store, the scan
of everyone's) and the watchdog of the store connection. They only observe and post events;
:mod:`torchrun_jsc.runtime.watch.machine` decides."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .. import timing
from ..store.protocol import Beat, JobProtocol
from ..watch import heartbeats
from ..watch.heartbeats import Tracker
from ..watch.vocabulary import Event, MembersLost, StoreQuiet


class Round(NamedTuple):
    """This node in the current rendezvous round."""

    me: str
    members: Sequence[str]
    #: Whether this node serves the store (and so watches everyone's heartbeats).
    serving: bool
    restarts_left: bool
    #: Recovery: the watcher also counts the live spares, of those the job had when the
    #: round formed (``spares``; :mod:`..watch.quorum`).
    recovery: bool = False
    spares: Sequence[str] = ()


class Heartbeats:
    """Beats every few seconds; scans the members' counters where this node serves."""

    def __init__(
        self,
        protocol: JobProtocol,
        peer_timeout: float,
        post: Callable[[Event], None],
        told_to_stop: Callable[[], None],
        round_now: Callable[[], Round],
        closing: threading.Event,
    ) -> None:
        self.protocol = protocol
        self.peer_timeout = peer_timeout
        #: Seconds between two beats (the interval for the peer timeout).
        self.interval = heartbeats.interval_for(peer_timeout)
        self.post = post
        self.told_to_stop = told_to_stop
        self.round_now = round_now
        self.closing = closing
        self.tracker = Tracker(peer_timeout)
        self._known: List[str] = []
        self.spare_tracker = Tracker(peer_timeout)
        self._spares: List[str] = []
        #: Every spare key read from the store so far (only new slots are read again).
        self._registered: List[str] = []
        #: The spares that beat within the peer timeout outside the round, at the last scan.
        self.waiting: Tuple[str, ...] = ()
        #: When the members' counters were last read (monotonic; None: never).
        self._scanned: Optional[float] = None

    def run(self) -> None:
        """The heartbeat thread's loop, until the process ends."""
        interval = self.interval
        while not self.closing.is_set():
            try:
                current = self.round_now()
                beat = self.protocol.beat(current.me)
                if current.serving:
                    self._scan(current)
            except Exception:  # a store that went away: the watchdog decides
                self._wait(interval)
                continue
            if beat.stop and not self.closing.is_set():
                self.told_to_stop()
            self._wait(interval)

    def _wait(self, interval: float) -> None:
        """Wait for the next beat; a wait that took the peer timeout longer than asked means
        that this node did not run (its processes were stopped): that is posted first, before
        any news the next beat brings. (Only the wait counts: a store operation that takes
        long is the watchdog's business.)"""
        started = time.monotonic()
        if self.closing.wait(interval):
            return
        paused = time.monotonic() - started - interval
        if paused >= self.peer_timeout:
            self.post(paused_for(self.protocol, paused))

    def _follow(
        self, tracker: Tracker, keys: List[str], known: List[str]
    ) -> Dict[str, Optional[Beat]]:
        """The counters of ``keys``; when they are not the ``known`` ones (updated in place),
        their counters are made to exist first and ``tracker`` watches exactly them."""
        if keys != known:
            self.protocol.watch(keys)
            tracker.members(keys, time.monotonic())
            known[:] = keys
        return self.protocol.beats(keys) if keys else {}

    def _scan(self, current: Round) -> None:
        members = list(current.members)
        beats = self._follow(self.tracker, members, self._known)
        now = self._scanned = time.monotonic()
        for key, beat in beats.items():
            if beat is not None and beat.done:
                self.tracker.finished(key)
        # a stop written over a counter is no word from its member: not a change to observe
        heard = {
            k: None if b is not None and b.stop and not b.beats else b for k, b in beats.items()
        }
        lost = [k for k in self.tracker.observe(heard, now) if k != current.me]
        spares = self._live_spares(members) if current.recovery else 0
        if not lost:
            return
        known = [s for s in self.waiting if s in current.spares]
        watched = self.tracker.watched()
        gone = [k for k in members if k not in watched and k != current.me]
        quiet = self.tracker.quiet_for(lost[0], now)
        who = self.protocol.who(lost[0])
        self.post(
            MembersLost(
                keys=tuple(lost),
                hostname=who.hostname if who and who.hostname else lost[0],
                node_rank=who.node_rank if who else None,
                quiet=quiet,
                last_seen=time.time() - quiet,
                restarts_left=current.restarts_left,
                members=len(members),
                gone=len(gone),
                spares=spares,
                known=len(current.spares),
                known_live=len(known),
            )
        )

    def _live_spares(self, members: Sequence[str]) -> int:
        """How many registered spares beat within the peer timeout (outside the round)."""
        self._registered += self.protocol.spares(len(self._registered))
        spares = [s for s in self._registered if s not in members]
        beats = self._follow(self.spare_tracker, spares, self._spares)
        if not spares:
            self.waiting = ()
            return 0
        values = {k: None if b is None else b.beats for k, b in beats.items()}
        quiet = self.spare_tracker.observe(values, time.monotonic())
        self.waiting = tuple(s for s in spares if s not in quiet)
        return len(self.waiting)

    def quiet(self, me: str) -> Dict[str, float]:
        """Every other member's seconds of quiet (workers not done), as of now; empty unless
        the counters were read within the last two heartbeats (else they tell nothing)."""
        now, interval = time.monotonic(), self.interval
        if self._scanned is None or now - self._scanned > 2 * interval:
            return {}
        return {k: q for k, q in self.tracker.quiet(now).items() if k != me}

    def rewatch(self, lost: Sequence[str]) -> None:
        """Watch the round's members without ``lost`` (torch re-forms the job without them)."""
        keep = [k for k in self._known if k not in lost]
        self.tracker.members(keep, time.monotonic())


def paused_for(protocol: JobProtocol, paused: float) -> StoreQuiet:
    """A look at the store connection by a thread that finds it did not run for ``paused``
    seconds (the watch decides what that means)."""
    store, now = protocol.store, time.monotonic()
    return StoreQuiet(
        stuck=store.in_flight(now), silent=now - store.last_ok, now=time.time(), paused=paused
    )


class Watchdog:
    """The watchdog thread: one look at the store connection every second, and when the last
    look was (for the process's end, which may come before the thread's next look after a
    freeze)."""

    def __init__(
        self, protocol: JobProtocol, post: Callable[[Event], None], closing: threading.Event
    ) -> None:
        self.protocol = protocol
        self.post = post
        self.closing = closing
        self.last = time.monotonic()

    def paused(self) -> float:
        """How much longer ago than its period the last look was."""
        return max(time.monotonic() - self.last - timing.WATCHDOG_EVERY, 0.0)

    def run(self) -> None:
        """The thread's loop, until the process ends."""
        while not self.closing.wait(timing.WATCHDOG_EVERY):
            # the last look moves on only after this one is decided: another thread that
            # asks meanwhile (thawed, it found a stop) still sees the pause
            now = time.monotonic()
            self.post(paused_for(self.protocol, self.paused()))
            self.last = now
