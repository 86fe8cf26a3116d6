"""Whether a SIGUSR1/SIGUSR2 the agent got reached its workers directly too. Pure.

Who signals the workers along with the agent depends on the sender and on how it finds a step's
processes: slurmstepd with proctrack/linuxproc signals the task's descendants, with
proctrack/cgroup the whole cgroup, with proctrack/pgid only the task's process group; psslurm
has rules of its own; ``kill`` reaches whom it is given. Rather than assume one, the agent asks
a process placed like the workers (its child, in a session of its own, in its cgroup: the
probe, :mod:`torchrun_jsc.runtime.signal_probe`) what it got. A probe's receipt of the same
signal within :data:`WINDOW` seconds of the agent's is the same delivery: its sender reached
the workers, so the agent does not pass the signal on; otherwise it does, once the window has
passed. Without a probe every signal is passed on.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

#: A probe's receipt of a signal this close (seconds, either way) to the agent's is the same
#: delivery. A sender signals a step's processes within a millisecond (measured: 0.4 ms for
#: ``scancel --signal``); the rest is room for a loaded node. A signal only the agent got is
#: passed on this late.
WINDOW = 2.0


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
    probe reports or the window ends); ``receipt``: the probe's receipt it paired with."""

    action: str
    receipt: Optional[Receipt]
    reason: str


def decide(
    signum: int,
    at: float,
    receipts: Sequence[Receipt],
    now: float,
    probe_running: bool,
    window: float = WINDOW,
) -> Decision:
    """The decision for signal ``signum`` the agent got at ``at``, given the probe's unpaired
    ``receipts`` (oldest first) and whether the probe still runs."""
    for receipt in receipts:
        if receipt.signum == signum and abs(receipt.at - at) <= window:
            return Decision(
                "direct",
                receipt,
                f"from pid {receipt.sender} ({receipt.sender_name}), which signalled the workers"
                " too",
            )
    if not probe_running:
        return Decision("forward", None, "no signal probe to tell whether the workers got it")
    if now < at + window:
        return Decision("wait", None, "the probe has not reported it yet")
    return Decision(
        "forward",
        None,
        f"its sender did not signal the workers (the probe got none in {window:g} s)",
    )


def unpaired(
    receipts: Sequence[Receipt], used: Optional[Receipt], at: float, window: float = WINDOW
) -> List[Receipt]:
    """The receipts left to pair after the agent's signal at ``at`` was decided: without the
    one it used and without those too old to pair with any later signal."""
    left = list(receipts)
    if used is not None:
        left.remove(used)
    return [r for r in left if r.at >= at - window]
