"""All versions: group ranks follow the node rank instead of the advertised address as a string.

torch gives group ranks in ``_DistributedRendezvousOpExecutor._mark_rendezvous_complete`` by
sorting the participants' ``_NodeDesc`` (address string, pid, local id): ``10.0.0.100`` sorts
before ``10.0.0.98``. Every node's descriptor here carries its node rank in the high bits of its
``local_id`` (set in ``_NodeDescGenerator.generate``), and whichever node completes the round
re-assigns the ranks in node-rank order; the ranks travel in the shared rendezvous state, so all
nodes agree. A participant without a node rank (a launcher without this patch) sorts last, in
torch's order.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Tuple

from ..handover import RANK_SHIFT
from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (
    Check(DYNAMIC_RENDEZVOUS, "_NodeDescGenerator.generate", (("self",), ("self", "local_addr"))),
    Check(
        DYNAMIC_RENDEZVOUS,
        "_DistributedRendezvousOpExecutor._mark_rendezvous_complete",
        (("self",),),
    ),
)
#: The node rank lives above these bits of ``local_id`` (torch counts handlers in the low bits).
SHIFT = RANK_SHIFT


def encode(node_rank: int, local_id: int) -> int:
    """A ``local_id`` carrying ``node_rank``."""
    return ((node_rank + 1) << SHIFT) | (local_id & ((1 << SHIFT) - 1))


def order_key(node: Any) -> Tuple[int, int, Any]:
    """Sort key: participants with a node rank first, by node rank; then torch's order."""
    carried = int(node.local_id) >> SHIFT
    return (0, carried - 1, node) if carried else (1, 0, node)


def install(node_rank: int) -> None:
    """Carry ``node_rank`` in this node's descriptor; order ranks by node rank."""
    (g_owner, g_attr, generate), (c_owner, c_attr, complete) = verified(CHECKS)

    @functools.wraps(generate)
    def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        desc = generate(self, *args, **kwargs)
        return dataclasses.replace(desc, local_id=encode(node_rank, desc.local_id))

    @functools.wraps(complete)
    def _mark_rendezvous_complete(self: Any) -> None:
        complete(self)
        state = self._state
        for rank, node in enumerate(sorted(state.participants, key=order_key)):
            state.participants[node] = rank

    replace(g_owner, g_attr, _generate)
    replace(c_owner, c_attr, _mark_rendezvous_complete)
