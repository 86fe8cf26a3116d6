"""Spares: agents beyond ``--nnodes``' maximum, which torch's rendezvous keeps waiting. Before
its first round, an agent looks every few seconds whether a round formed without it (the
watcher publishes each round's members); it is a spare then, and from then on it looks whether
the job ended (a node noted that it completed, or a stop was recorded) until it joins a round.
This thread only observes and posts events; :mod:`torchrun_jsc.runtime.watch.machine` decides."""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Tuple

from ...handover import Candidate
from ..store.protocol import JobProtocol
from ..watch.vocabulary import Event, Phase, SpareFound, SpareReleased


class SpareLook:
    """The thread of an agent that has not joined a round yet."""

    def __init__(
        self,
        protocol: JobProtocol,
        me: str,
        phase: Callable[[], Phase],
        post: Callable[[Event], None],
        closing: threading.Event,
        interval: float,
        next_hosts: Callable[[List[str]], Tuple[Candidate, ...]] = lambda members: (),
    ) -> None:
        self.next_hosts = next_hosts
        #: The latest round posted (a spare posts each new one).
        self._seen: Optional[Tuple[int, Tuple[str, ...]]] = None
        self.protocol = protocol
        self.me = me
        self.phase = phase
        self.post = post
        self.closing = closing
        self.interval = interval

    def run(self) -> None:
        """Look until this node joins a round, ends, or the process ends."""
        while not self.closing.wait(self.interval):
            phase = self.phase()
            try:
                if phase == Phase.WAITING:
                    self._look_for_round()
                elif phase == Phase.SPARE:
                    self._look_for_end()
                else:
                    return
            except Exception:  # a store that went away: the watchdog decides
                continue

    def _look_for_round(self) -> None:
        latest = self.protocol.latest_round()
        if latest is not None and self.me not in latest[1] and latest != self._seen:
            self._seen = latest
            number, members = latest[0], list(latest[1])
            found = SpareFound(
                size=len(members),
                next_hosts=self.next_hosts(members),
                restart=self.protocol.restart(),
                spares=len(self.protocol.round_spares(number, members)),
            )
            self.post(found)

    def _look_for_end(self) -> None:
        self._look_for_round()  # a new round (a restart): who would host next, the count
        if self.protocol.stopped():
            self.post(SpareReleased(completed=False))
        elif self.protocol.completed():
            self.post(SpareReleased(completed=True))
