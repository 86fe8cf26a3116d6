"""A rendezvous round as the job watch sees it (recovery): its number in the job (torch's round
number minus the job's first, noted once in the store, so every node counts the same) and who
left and came since this node's previous round, by name."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

from .. import timing
from ..store.bounded import bounded
from ..store.protocol import JobProtocol
from ..watch.vocabulary import Joined, Member


class Rounds:
    """The rounds of one agent."""

    def __init__(self, protocol: JobProtocol, offset: int = 0) -> None:
        self.protocol = protocol
        #: torch's number of the job's first round, once known.
        self.first: Optional[int] = None
        #: The job's restarts before this store's first round (after a handover).
        self.offset = offset
        #: The spares the job had when the latest round formed (:mod:`..watch.quorum`).
        self.spares: Tuple[str, ...] = ()

    def joined(
        self, before: Sequence[str], members: Sequence[str], number: int, serving: bool
    ) -> Joined:
        """The event for round ``number`` with ``members`` after ``before``; the watcher
        (``serving``) publishes the round for the agents not in it (spares)."""
        protocol = self.protocol
        if serving:
            bounded(lambda: protocol.publish_round(number, members), timing.STORE_WAIT)
        if self.first is None:
            self.first = bounded(lambda: protocol.first_round(number), timing.STORE_WAIT)
        restart = self.offset + max(number - (number if self.first is None else self.first), 0)
        if serving:  # for the spares, which count with the job when they hand over
            bounded(lambda: protocol.note_restart(restart), timing.STORE_WAIT)
        found = bounded(lambda: protocol.round_spares(number, members), timing.STORE_WAIT)
        self.spares = found or ()
        if not before or restart == self.offset:
            return Joined(restart=restart, size=len(members), spares=len(self.spares))
        return Joined(
            restart=restart,
            size=len(members),
            left=self._names(k for k in before if k not in members),
            came=self._names(k for k in members if k not in before),
            spares=len(self.spares),
        )

    def _names(self, members: Iterable[str]) -> Tuple[Member, ...]:
        return tuple(self.member(m) for m in members)

    def member(self, key: str) -> Member:
        """A member as its node introduced itself (its key when it did not)."""
        protocol = self.protocol
        who = bounded(lambda: protocol.who(key), timing.HANG)
        if who is None or not who.hostname:
            return Member(key)
        return Member(who.hostname, who.node_rank)
