"""Whether a SIGUSR1/SIGUSR2 the agent got reached its workers directly too. Pure.

Who signals the workers along with the agent depends on the sender and on how it finds a step's
processes: slurmstepd with proctrack/linuxproc signals the task's descendants, with
proctrack/cgroup the whole cgroup, with proctrack/pgid only the task's process group; psslurm
has rules of its own; ``kill`` reaches whom it is given. Rather than assume one, the agent asks
a process placed like the workers (its child, in a session of its own, in its cgroup: the
probe, :mod:`torchrun_jsc.runtime.signals.probe`) what it got. A probe's receipt of the same
signal close in time to the agent's handler is the same delivery: its sender reached the
workers, so the agent does not pass the signal on; otherwise it does, once the probe has had
:data:`LATER` seconds to report. Without a probe every signal is passed on.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

#: The agent's handler may run this long (seconds) after the probe got the same signal: Python
#: runs a handler when the main thread is back in Python, and runs it once for several signals
#: that came meanwhile, so every receipt in this span before the handler pairs with it.
EARLIER = 10.0
#: The probe's report may come this long after the agent's handler ran (a sender signals a
#: step's processes within a millisecond, measured 0.4 ms for ``scancel --signal``; the rest is
#: room for a loaded node). A signal only the agent got is passed on this late.
LATER = 2.0


class Receipt(NamedTuple):
    """A signal the probe got: its number, when (``time.monotonic()``), who sent it (pid and
    command name, from the signal's ``si_pid``)."""

    signum: int
    at: float
    sender: int
    sender_name: str


class Decision(NamedTuple):
    """What to do with a signal the agent got: ``action`` is ``forward`` (pass it on),
    ``direct`` (the workers got it from its sender: do not) or ``wait`` (ask again when the
    probe reports or :data:`LATER` has passed); ``paired``: the probe's receipts it stands
    for."""

    action: str
    paired: Tuple[Receipt, ...]
    reason: str


def decide(
    signum: int, at: float, receipts: Sequence[Receipt], now: float, probe_running: bool
) -> Decision:
    """The decision for signal ``signum`` whose handler ran at ``at``, given the probe's unpaired
    ``receipts`` (oldest first) and whether the probe still runs. It pairs with every receipt
    of the same signal from up to :data:`EARLIER` seconds before, else with the first one up to
    :data:`LATER` seconds after."""
    same = [r for r in receipts if r.signum == signum]
    paired = tuple(r for r in same if at - EARLIER <= r.at <= at)
    paired = paired or tuple(r for r in same if at < r.at <= at + LATER)[:1]
    if paired:
        first = paired[0]
        return Decision(
            "direct",
            paired,
            f"from pid {first.sender} ({first.sender_name}), which signalled the workers too",
        )
    if not probe_running:
        return Decision("forward", (), "no signal probe to tell whether the workers got it")
    if now < at + LATER:
        return Decision("wait", (), "the probe has not reported it yet")
    return Decision(
        "forward", (), f"its sender did not signal the workers (the probe got none in {LATER:g} s)"
    )


def unpaired(receipts: Sequence[Receipt], paired: Sequence[Receipt], at: float) -> List[Receipt]:
    """The receipts left to pair after the signal whose handler ran at ``at`` was decided:
    without those it paired with, and without those too old to pair with a later one."""
    return [r for r in receipts if r not in paired and r.at >= at - EARLIER]
