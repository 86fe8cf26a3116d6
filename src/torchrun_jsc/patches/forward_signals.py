"""All versions: SIGUSR1/SIGUSR2 sent to the agent reach every worker once (torch has no
handler for them, so they would kill the agent and orphan the workers; what a worker does with
them is the training script's).

The agent's handler only notes the signal; a thread decides
(:mod:`torchrun_jsc.runtime.signals.direct`): when the signal probe
(:mod:`torchrun_jsc.runtime.signals.probe`, started with the command line of the first worker
``worker_start`` sees) got the same signal, its sender reached the workers too and the agent
leaves it; otherwise the agent passes it on to the workers that ``worker_start`` registers.
torch's handlers for other signals stay as they are."""

from __future__ import annotations

import queue
import signal
import threading
import time
from typing import Any, Callable, Optional, Sequence, Tuple

from ..log import logger
from ..runtime import agent
from ..runtime.events.entry import SIGNAL
from ..runtime.processes.workers import Workers
from ..runtime.signals.direct import LATER, decide, unpaired
from ..runtime.signals.probe import Probe
from . import worker_start
from ._common import on_restore, verified

CHECKS = worker_start.CHECKS


def install(signals: Sequence[str]) -> None:
    """Pass ``signals`` (names, e.g. ``SIGUSR1``) on to the workers that did not get them."""
    verified(CHECKS)
    workers = agent.runtime().workers
    forwarder = Forwarder([int(getattr(signal, name)) for name in signals], workers)
    forwarder.start()
    on_restore(forwarder.stop, ends_own=True)
    on_restore(workers.before_start(forwarder.starting))
    for number in forwarder.signals:
        on_restore(_restorer(number, signal.signal(number, forwarder.noted)))


def _restorer(number: int, before: Any) -> Callable[[], None]:
    def restore() -> None:
        signal.signal(number, before)

    return restore


class Forwarder:
    """Notes each signal the agent gets (the handler, :meth:`noted`) and, in a thread of its
    own, passes it on to ``workers`` or not once the probe's answer is in."""

    def __init__(self, signals: Sequence[int], workers: Workers) -> None:
        self.signals = tuple(signals)
        self.workers = workers
        self.probe = Probe(self.signals)
        self._noted: queue.Queue[Optional[Tuple[int, float]]] = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._probed = False

    def start(self) -> None:
        """Start the thread. Until the probe starts (:meth:`starting`) there is no worker, and a
        signal is passed on at once (to none)."""
        self._thread = threading.Thread(target=self._run, daemon=True, name="trjsc-signals")
        self._thread.start()

    def starting(self, worker: Sequence[str]) -> None:
        """A worker with the command line ``worker`` is about to start: the first time, start the
        probe with that command line."""
        if self._probed:
            return
        self._probed = True
        problem = self.probe.start(on_end=self.without_probe, worker=worker)
        if problem is not None:
            self.without_probe(problem)

    def noted(self, signum: int, frame: Any) -> None:
        """The signal handler: note the signal and when it came; the thread does the rest."""
        self._noted.put((signum, time.monotonic()))

    def _run(self) -> None:
        while True:
            item = self._noted.get()
            if item is None:
                return
            self._settle(*item)

    def _settle(self, signum: int, at: float) -> None:
        """Decide on signal ``signum`` the agent got at ``at`` (waiting for the probe, at most
        :data:`~torchrun_jsc.runtime.signals.direct.LATER` seconds) and act."""
        probe = self.probe
        with probe.changed:
            while True:
                decision = decide(signum, at, probe.receipts, time.monotonic(), probe.running)
                if decision.action != "wait":
                    break
                probe.changed.wait(max(at + LATER - time.monotonic(), 0.01))
            probe.receipts[:] = unpaired(probe.receipts, decision.paired, at)
        name = signal.Signals(signum).name
        sent = 0
        if decision.action == "direct":
            logger.warning("torchrun_jsc: %s %s; not passed on", name, decision.reason)
        else:
            sent = self.workers.signal_all(signum)
            logger.warning("torchrun_jsc: passed %s on to %d worker(s)", name, sent)
        session = agent.runtime().session
        if session is not None:  # where this node writes the event log
            fields = {"signal": name, "passed_on": decision.action != "direct", "workers": sent}
            session.note(SIGNAL, fields, flush=False)

    def without_probe(self, why: str) -> None:
        """Say that there is no probe (it did not start, or it ended): every signal is passed
        on from now on."""
        names = "/".join(signal.Signals(s).name for s in self.signals)
        logger.warning(
            "torchrun_jsc: %s; %s will be passed on to the workers even when they got it directly",
            why,
            names,
        )

    def stop(self) -> None:
        """End the thread and the probe (tests; both end with the agent anyway)."""
        self._noted.put(None)
        if self._thread is not None:
            self._thread.join(10)
        self.probe.stop()
