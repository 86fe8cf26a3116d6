"""Who may go on after a loss (pure): of two sides of any partition, at most one.

The job's nodes at a round are that round's members and the spares registered when it formed
(:meth:`~torchrun_jsc.runtime.store.protocol.JobProtocol.round_spares`; every node reads the same
number). A group of nodes may form the next round only with a strict majority of them, or
exactly half of them with the last round's rendezvous host among them: the side that keeps the
store (the host's) and the side that hands over (without the host) can then never both go on.
``--nnodes``' minimum applies on top. Losses one after another are judged round by round.
"""

from __future__ import annotations

from typing import Optional


def needed(total: int, with_host: bool) -> int:
    """How many of the last round's ``total`` nodes a group needs to go on: a strict
    majority, or half with the rendezvous host."""
    return (total + 1) // 2 if with_host else total // 2 + 1


def refusal(left: int, total: int, with_host: bool) -> Optional[str]:
    """Why ``left`` of the last round's ``total`` nodes may not go on (None: they may)."""
    if left >= needed(total, with_host):
        return None
    verb = "is" if left == 1 else "are"
    return (
        f"{left} of the job's {total} nodes {verb} left here, and going on needs"
        f" {needed(total, False)} (a majority; {needed(total, True)} with the rendezvous host):"
        " the others may be training on without this node"
    )
