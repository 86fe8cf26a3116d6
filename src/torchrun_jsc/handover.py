"""Handing the rendezvous over when its host is lost (pure: no I/O, no torch).

When the node that serves the rendezvous store is lost, every other node (the spares too)
picks the same next host from what it learned in the last round: the round's members in
node-rank order (a member's store key carries its advertised address and, in the high bits of
its ``local_id``, its node rank; see :mod:`torchrun_jsc.patches.rank_order`), without the lost
host and the members already lost. Each node then starts itself again (the same command line,
the same process) with :data:`VARIABLE` set: the request reads it once and the new process
joins a fresh rendezvous at the next host's address and the same port, the next host serving
it. What carries over is in :class:`Handover`; everything else is planned anew.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, NamedTuple, Optional, Sequence, Tuple

from .errors import ConfigError
from .network import parse_endpoint

#: The variable a node that hands over sets for its own next process (not a user setting).
VARIABLE = "TORCHRUN_JSC_HANDOVER"
#: A participant's node rank + 1 lives above these bits of its ``local_id`` (torch counts
#: handlers in the low bits); written by :mod:`torchrun_jsc.patches.rank_order`.
RANK_SHIFT = 16


class Candidate(NamedTuple):
    """A round member that could host the next round."""

    key: str
    address: str
    node_rank: Optional[int]

    @property
    def name(self) -> str:
        """``node rank 1 (10.78.0.11)``, or the address alone."""
        if self.node_rank is None:
            return self.address
        return f"node rank {self.node_rank} ({self.address})"


def member(key: str) -> Candidate:
    """A member's store key (``<address>_<pid>_<local_id>``) read back."""
    address, _, rest = key.rpartition("_")
    address, _, _pid = address.rpartition("_")
    local_id = int(rest) if rest.isdigit() else 0
    carried = local_id >> RANK_SHIFT
    return Candidate(key, address or key, carried - 1 if carried else None)


def order(
    members: Iterable[str],
    host_addresses: Sequence[str],
    lost: Iterable[str] = (),
    host_rank: Optional[int] = None,
) -> Tuple[Candidate, ...]:
    """The members that may host the next round, in the order they are tried: node-rank order
    (members without a node rank last, in the order given), without the current host (node
    rank ``host_rank``, or a member at one of its addresses) and the members in ``lost``.

    A key's address is torch's name for the node: the advertised address from torch 2.0, the
    hostname before. The session replaces the first candidate's with the address the node
    published itself (:meth:`~torchrun_jsc.runtime.store.protocol.JobProtocol.introduce`)."""
    gone = set(lost)
    found = [member(k) for k in members if k not in gone]
    found = [
        c
        for c in found
        if c.address not in host_addresses and (host_rank is None or c.node_rank != host_rank)
    ]
    return tuple(sorted(found, key=lambda c: (c.node_rank is None, c.node_rank or 0)))


def endpoint(address: str, port: int) -> str:
    """``10.78.0.11:29500`` or ``[fd00:78::11]:29500``."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class Handover(NamedTuple):
    """What a node that hands over tells its next process."""

    #: The next rendezvous endpoint (the next host's address, the same port).
    endpoint: str
    #: The next host's node rank (None: the host is found by its address).
    host_node_rank: Optional[int]
    #: The job's restart count the next round is (restarts carry over).
    restart: int
    #: Who was lost, for the restart line (``the rendezvous host node0i:29500``).
    lost: str
    #: How long the next host may take to serve the next round, in seconds; then it is
    #: lost too and the job stops.
    wait: float
    #: The fewest nodes the next round may have: a majority of the job's nodes at the last
    #: round (its members and spares, :mod:`torchrun_jsc.runtime.watch.quorum`), so that a group cut
    #: off from the host (it takes the host for lost) never goes on beside it.
    quorum: int = 1
    #: This node waited as a spare.
    spare: bool = False
    #: The node ranks of the nodes lost so far (the rendezvous hosts, and the nodes that left
    #: earlier rounds), in order: a requeue leaves them out (the store that knew of them is
    #: gone).
    lost_nodes: Tuple[int, ...] = ()

    @property
    def host_name(self) -> str:
        """The next host, for messages."""
        rank = "" if self.host_node_rank is None else f"node rank {self.host_node_rank} at "
        return f"{rank}{self.endpoint}"


def encode(handover: Handover) -> str:
    """The variable's value."""
    return json.dumps(handover._asdict(), separators=(",", ":"), sort_keys=True)


#: What the variable accepts (it is written by torchrun_jsc itself).
ACCEPTS = (
    "the JSON object a torchrun_jsc agent writes when it hands the rendezvous over (keys: "
    + ", ".join(Handover._fields)
    + "); unset it to start a job"
)


def decode(text: str) -> Handover:
    """The variable's value read back; raises :class:`ConfigError` in one line."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{VARIABLE}: {why}; accepted: {ACCEPTS}")

    try:
        data: Any = json.loads(text)
    except ValueError:
        raise bad("not JSON") from None
    if not isinstance(data, dict) or set(data) != set(Handover._fields):
        raise bad("not the expected object")
    rank, restart, wait = data["host_node_rank"], data["restart"], data["wait"]
    lost_nodes = data["lost_nodes"]
    checks = (
        (isinstance(data["endpoint"], str) and _names_a_node(data["endpoint"]), "endpoint"),
        (rank is None or (_is_int(rank) and rank >= 0), "host_node_rank"),
        (_is_int(restart) and restart >= 1, "restart"),
        (isinstance(data["lost"], str), "lost"),
        (
            isinstance(wait, (int, float))
            and not isinstance(wait, bool)
            and math.isfinite(wait)
            and wait > 0,
            "wait",
        ),
        (isinstance(data["spare"], bool), "spare"),
        (_is_int(data["quorum"]) and data["quorum"] >= 1, "quorum"),
        (
            isinstance(lost_nodes, list) and all(_is_int(r) and r >= 0 for r in lost_nodes),
            "lost_nodes",
        ),
    )
    for ok, field in checks:
        if not ok:
            raise bad(f"{field} {json.dumps(data[field])} is not valid")
    return Handover(**{**data, "lost_nodes": tuple(lost_nodes)})


def _names_a_node(text: str) -> bool:
    """An endpoint torch reads as one node's address and a port (as ``--rdzv_endpoint`` is
    checked for a multi-node launch)."""
    try:
        endpoint = parse_endpoint(text)
    except ConfigError:
        return False
    return not endpoint.is_wildcard and endpoint.port != 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def nodes(count: int) -> str:
    """``1 node``, ``3 nodes``."""
    return f"{count} node{'' if count == 1 else 's'}"


def restart_line(handover: Handover, max_restarts: int, size: int) -> str:
    """Said on every node when the handed-over round forms."""
    return (
        f"torchrun_jsc: restart {handover.restart} of {max_restarts}: {handover.lost} lost;"
        f" going on with {nodes(size)}, {handover.host_name} hosting the rendezvous"
    )
