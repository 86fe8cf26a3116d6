"""Heartbeat bookkeeping: who is alive, measured on one clock. Pure: values and times in,
lost members out.

Every agent adds 1 to its own counter in the rendezvous store every few seconds. The watching
node (the one that serves the store) reads all counters each round and remembers, on its own
monotonic clock, when each counter last changed: a member whose counter has not changed for the
peer timeout is lost. Nothing compares clocks of different nodes, so clock skew cannot raise a
false alarm, and a watcher that was itself paused sees every live counter moved on.
"""

from __future__ import annotations

from typing import Dict, Hashable, Iterable, List, Mapping, Optional, Tuple

from .. import timing


def interval_for(peer_timeout: float) -> float:
    """Seconds between heartbeats for a peer timeout: a quarter of it, at most 5 s (one small
    store operation per node every 5 s at the default timeout of 60 s)."""
    return min(5.0, peer_timeout / 4)


def host_lost(stuck: float, silent: float, peer_timeout: float, done: bool) -> bool:
    """Whether a node has lost the rendezvous host: its store operation in flight has hung for
    the peer timeout, or (while its workers run) no operation has succeeded for the timeout and
    one heartbeat interval. Once its workers are done, failing operations are no loss: after a
    good end the host may have left first."""
    if stuck >= peer_timeout:
        return True
    return not done and silent >= peer_timeout + interval_for(peer_timeout)


def sort_out(quiet: Mapping[str, float], beat: float) -> Tuple[List[str], List[str]]:
    """Members that wrote no record at a failure, by how long they have been quiet (seconds):
    those that vanished and those that may have (worth waiting for), each in key order."""
    gone = sorted(k for k, q in quiet.items() if q >= timing.VANISHED_BEATS * beat)
    unsure = sorted(
        k
        for k, q in quiet.items()
        if timing.SUSPECT_BEATS * beat < q < timing.VANISHED_BEATS * beat
    )
    return gone, unsure


class Tracker:
    """The watcher's view: for every member, the last counter value and when it changed."""

    def __init__(self, peer_timeout: float) -> None:
        self.peer_timeout = peer_timeout
        self._value: Dict[str, Optional[Hashable]] = {}
        self._changed: Dict[str, float] = {}
        self._done: Dict[str, bool] = {}

    def members(self, keys: Iterable[str], now: float) -> None:
        """Watch exactly ``keys`` from now on (a new rendezvous round); members already watched
        keep their history, new ones start their clock now."""
        keys = list(keys)
        for key in list(self._value):
            if key not in keys:
                del self._value[key], self._changed[key]
                self._done.pop(key, None)
        for key in keys:
            if key not in self._value:
                self._value[key] = None
                self._changed[key] = now

    def watched(self) -> List[str]:
        """The members watched now."""
        return list(self._value)

    def finished(self, key: str) -> None:
        """``key``'s workers are done: it may go quiet without being lost."""
        self._done[key] = True

    def observe(self, values: Mapping[str, Optional[Hashable]], now: float) -> List[str]:
        """Record one reading (key -> counter value, None when missing); return the members
        lost now, in key order: quiet for at least the timeout and not finished."""
        for key, value in values.items():
            if key in self._value and value is not None and value != self._value[key]:
                self._value[key] = value
                self._changed[key] = now
        return sorted(
            key
            for key, changed in self._changed.items()
            if now - changed >= self.peer_timeout and not self._done.get(key)
        )

    def quiet_for(self, key: str, now: float) -> float:
        """Seconds since ``key``'s counter last changed."""
        return now - self._changed.get(key, now)

    def quiet(self, now: float) -> Dict[str, float]:
        """Seconds of quiet of every watched member whose workers are not done."""
        return {k: now - c for k, c in self._changed.items() if not self._done.get(k)}
