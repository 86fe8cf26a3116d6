"""Failover, the job watch's part (of :class:`~.session.Session`): who would host the next
round, the first candidate's own address, holding torch while the watch decides, and starting
this agent again at the next host."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

from .. import handover
from . import relaunch, timing
from .ledger import say
from .processes import workers
from .processes.end import exit_now
from .store.bounded import bounded
from .store.protocol import JobProtocol
from .watch.vocabulary import Config, Event, HandOver, LookUpNextHost, NextHosts, Phase, State


class Failover(NamedTuple):
    """What the ``failover`` patch tells the session."""

    #: How long the next host has to serve after a handover.
    wait: float
    #: The current rendezvous host: its addresses and node rank (it is no candidate).
    host_addresses: Tuple[str, ...]
    host_rank: Optional[int]
    #: The address this node advertises (it tells the others, should it host next).
    address: Optional[str]
    #: The handover this process continues.
    previous: Optional[handover.Handover]


class FailingOver:
    """The failover's side of the session; :class:`~.session.Session` holds the state."""

    config: Config
    state: State
    protocol: Optional[JobProtocol]
    failover: Optional[Failover]
    closing: threading.Event
    lock: threading.RLock
    #: The session's: decide on an event; run a target in a thread; the workers' grace.
    post: Callable[[Event], None]
    _thread: Callable[[Any, str], None]
    _grace: Callable[[], float]

    def _next_hosts(self, members: List[str]) -> Tuple[handover.Candidate, ...]:
        """Who would host the next round if the host were lost (failover), in order (the
        first one's own address is looked up once the watch holds them: :class:`LookUpNextHost`)."""
        failover = self.failover
        if not self.config.failover or failover is None:
            return ()
        return handover.order(members, failover.host_addresses, host_rank=failover.host_rank)

    def _learn_next_host(self, candidates: Tuple[handover.Candidate, ...]) -> None:
        """The address the first candidate published (its key holds torch's name for it,
        the hostname before torch 2.0): looked for until it is there, the peer timeout at
        most; a candidate at the host's own address is left out."""
        protocol, failover = self.protocol, self.failover
        if protocol is None or failover is None:
            return
        deadline = time.monotonic() + max(self.config.peer_timeout, timing.STORE_WAIT)
        left = list(candidates)
        while left and time.monotonic() < deadline and not self.closing.is_set():
            first = left[0]
            who = bounded(functools.partial(protocol.who, first.key), timing.STORE_WAIT)
            if who is None or who.address is None:
                self.closing.wait(timing.WATCHDOG_EVERY)
                continue
            if who.address in failover.host_addresses:
                left.pop(0)
                continue
            left[0] = first._replace(address=who.address)
            self.post(NextHosts(before=candidates, found=tuple(left)))
            return

    def park_for_handover(self) -> None:
        """torch's main thread while this node hands over: wait for the new process (it
        replaces this one); if it has not come within the grace and a little more, end."""
        if self.state.phase != Phase.HANDING_OVER:
            return
        time.sleep(self._grace() + timing.EXIT_GRACE)
        say("torchrun_jsc: cannot go on: the agent did not start again in time")
        exit_now(1)

    def hold_for_handover(self) -> None:
        """torch's rendezvous lost its store: while the watch may still decide to hand over
        (it declares the host lost after the peer timeout), wait for that decision, at most
        the peer timeout and two heartbeats; parked when it hands over."""
        config = self.config
        if not config.failover:
            return
        beat = config.beat_interval
        deadline = time.monotonic() + config.peer_timeout + 2 * beat + timing.WATCHDOG_EVERY
        going = (Phase.TRAINING, Phase.RESTARTING, Phase.SPARE)
        while time.monotonic() < deadline:
            self.park_for_handover()
            if self.state.phase not in going:
                return
            time.sleep(timing.WATCHDOG_EVERY)

    def _do_LookUpNextHost(self, action: LookUpNextHost) -> None:
        candidates = action.candidates
        self._thread(lambda: self._learn_next_host(candidates), "trjsc-next-host")

    def _do_HandOver(self, action: HandOver) -> None:
        self._thread(lambda: self._hand_over(action.handover), "trjsc-handover")

    def _hand_over(self, handed: handover.Handover) -> None:
        """Stop this node's workers, then start the agent again (this process ends here)."""
        workers.stop_all(self._grace())
        with self.lock:
            if self.state.exiting:  # stopped meanwhile (scancel, the time limit): no new start
                return
            relaunch.start_again(handed)
