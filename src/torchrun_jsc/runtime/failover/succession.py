"""Failover, the job watch's part (:class:`Succession`, which the session holds): who would
host the next round, the first candidate's own address, holding torch while the watch decides,
and starting this agent again at the next host."""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, List, Optional, Protocol, Tuple

from ... import handover
from .. import timing
from ..processes.end import exit_now
from ..processes.output import say
from ..processes.workers import Workers
from ..store.bounded import bounded
from ..store.protocol import JobProtocol
from ..watch.vocabulary import Config, Event, HandOver, LookUpNextHost, NextHosts, Phase, State
from . import relaunch


class Watch(Protocol):
    """What the failover reads of the session it serves (the session replaces its
    configuration, state and protocol as the job goes on, so they are read at each use)."""

    config: Config
    workers: Workers
    command: Optional[relaunch.Command]
    state: State
    protocol: Optional[JobProtocol]
    closing: threading.Event
    lock: threading.RLock

    def post(self, event: Event) -> None:
        """Decide on ``event`` and carry out what was decided."""

    def grace(self) -> float:
        """Seconds the workers have between SIGTERM and SIGKILL."""


class Succession:
    """The failover's part of the job watch, built by the session with the view it reads (the
    settings are the watch's config: ``failover`` says whether it is on)."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def next_hosts(self, members: List[str]) -> Tuple[handover.Candidate, ...]:
        """Who would host the next round if the host were lost, in order (the first one's own
        address is looked up once the watch holds them: :class:`LookUpNextHost`)."""
        config = self.watch.config
        if not config.failover:
            return ()
        return handover.order(members, config.host_addresses, host_rank=config.host_node_rank)

    def learn_next_host(self, candidates: Tuple[handover.Candidate, ...]) -> None:
        """The address the first candidate published (its key holds torch's name for it,
        the hostname before torch 2.0): looked for until it is there, the peer timeout at
        most; a candidate at the host's own address is left out."""
        watch = self.watch
        protocol = watch.protocol
        if protocol is None:
            return
        deadline = time.monotonic() + max(watch.config.peer_timeout, timing.STORE_WAIT)
        left = list(candidates)
        while left and time.monotonic() < deadline and not watch.closing.is_set():
            first = left[0]
            who = bounded(functools.partial(protocol.who, first.key), timing.STORE_WAIT)
            if who is None or who.address is None:
                watch.closing.wait(timing.WATCHDOG_EVERY)
                continue
            if who.address in watch.config.host_addresses:
                left.pop(0)
                continue
            left[0] = first._replace(address=who.address)
            watch.post(NextHosts(before=candidates, found=tuple(left)))
            return

    def park(self) -> None:
        """torch's main thread while this node hands over: wait for the new process (it
        replaces this one); if it has not come within the grace and a little more, end."""
        if self.watch.state.phase != Phase.HANDING_OVER:
            return
        time.sleep(self.watch.grace() + timing.EXIT_GRACE)
        say("torchrun_jsc: cannot go on: the agent did not start again in time")
        exit_now(1)

    def hold(self) -> None:
        """torch's rendezvous lost its store: while the watch may still decide to hand over
        (it declares the host lost after the peer timeout), wait for that decision, at most
        the peer timeout and two heartbeats; parked when it hands over."""
        config = self.watch.config
        if not config.failover:
            return
        beat = config.beat_interval
        deadline = time.monotonic() + config.peer_timeout + 2 * beat + timing.WATCHDOG_EVERY
        going = (Phase.TRAINING, Phase.RESTARTING, Phase.SPARE)
        while time.monotonic() < deadline:
            self.park()
            if self.watch.state.phase not in going:
                return
            time.sleep(timing.WATCHDOG_EVERY)

    def look_up(self, action: LookUpNextHost) -> None:
        """Learn the first candidate's address, in a thread of its own."""
        candidates = action.candidates
        _thread(lambda: self.learn_next_host(candidates), "trjsc-next-host")

    def hand_over(self, action: HandOver) -> None:
        """Stop this node's workers, then start the agent again, in a thread of its own."""
        _thread(lambda: self._hand_over(action.handover), "trjsc-handover")

    def _hand_over(self, handed: handover.Handover) -> None:
        """Stop this node's workers, then start the agent again (this process ends here)."""
        self.watch.workers.stop_all(self.watch.grace())
        with self.watch.lock:
            if (
                self.watch.state.exiting
            ):  # stopped meanwhile (scancel, the time limit): no new start
                return
            relaunch.start_again(self.watch.command, handed)


def _thread(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, daemon=True, name=name).start()
