"""The rendezvous host keeps its place in every round (recovery).

torch lets the first nodes to join a round be its members; an agent that comes once the round
is full waits as a spare. The rendezvous host is the one node that must not: it serves the
store and watches everyone's heartbeats, publishes each round for the spares and counts the
restarts, and none of that happens from outside the round. It creates the store before it
joins, so on a busy machine the others may reach the rendezvous first. Here a node that is not
the host holds back from the place that would bring a round to its quorum (``--nnodes``'
minimum) while the host is not a member yet: the host then always finds room. The hold ends
when the host joins, and after ``bound`` seconds in any case (the peer timeout: a host that
has not joined by then is taken as gone, and torch's own order decides), or sooner when
torch's own deadline for the join (``join_timeout``) is :data:`DEADLINE_MARGIN` away.
"""

from __future__ import annotations

import enum
from typing import Collection, Optional

#: A held node joins at the latest this many seconds before torch's deadline for its join.
DEADLINE_MARGIN = 10.0


class Place(enum.Enum):
    """What a node about to join a round does."""

    #: Join now (the host is in, this node is the host, or the round needs more nodes).
    JOIN = "join"
    #: Wait: joining would bring the round to its quorum without the host.
    HOLD = "hold"
    #: Join, although the host is not in: it has not joined for the bound.
    GIVE_UP = "give up"


def place(
    me: str,
    host: Optional[str],
    members: Collection[str],
    min_nodes: int,
    held: float,
    bound: float,
    left: float = float("inf"),
) -> Place:
    """Whether node ``me`` joins a round of ``members`` now. ``host``: the host's member key
    (``""``: the host has not said it yet; None: no host to keep a place for, e.g. this node
    is the host); ``held``: how long this node has held back already; ``left``: seconds to
    torch's deadline for this join."""
    if host is None or me == host or host in members:
        return Place.JOIN
    if len(members) + 1 < min_nodes:
        return Place.JOIN
    if held >= bound or left <= DEADLINE_MARGIN:
        return Place.GIVE_UP
    return Place.HOLD


def gave_up_line(bound: float) -> str:
    """What a node says when it joins without the host."""
    return (
        f"torchrun_jsc: the rendezvous host has not joined the round for {bound:g} s; this node"
        " joins without it (a host outside the round cannot watch the nodes or publish the"
        " round to spares)"
    )
