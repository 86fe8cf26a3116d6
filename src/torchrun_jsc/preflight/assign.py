"""Which peers each node probes: a fixed, small number, the same on every run (pure).

Probing every pair costs N·(N-1) connections, 36 million at 6,000 nodes, and every node would
accept N-1 of them at once. Instead the joined nodes are put in a ring (by node rank, then join
order) and position ``i`` probes position ``(i + s) mod N`` for each offset ``s`` of
:func:`probe_offsets`: ±1 (ring neighbours: neighbours in the node list, often on the same
switch), ±⌊√N⌋ (a few switches away) and ±⌊N/3⌋ (the other parts of the machine). A circulant
graph: every node probes as many peers as it is probed by, ``len(probe_offsets(N))``, at least
min(2, N-1) and at most 6 (the documented bound, :data:`MAX_PROBES`, is 8).
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

from .report import Member, by_rank

#: No node probes, or is probed by, more than this many others (the assignment uses at most 6).
MAX_PROBES = 8


def probe_offsets(n: int) -> List[int]:
    """The ring offsets for ``n`` nodes: distinct, each in 1..n-1, at least min(2, n-1) of them
    (every other node when there are at most 4 others), never more than :data:`MAX_PROBES`."""
    if n < 2:
        return []
    root, third = math.isqrt(n), n // 3
    offsets: List[int] = []
    for s in (1, -1, root, -root, third, -third):
        s %= n
        if s and s not in offsets:
            offsets.append(s)
    return offsets


def probe_targets(n: int) -> List[List[int]]:
    """``targets[i]``: the ring positions position ``i`` probes, for ``n`` nodes."""
    offsets = probe_offsets(n)
    return [[(i + s) % n for s in offsets] for i in range(n)]


def probers_of(n: int, j: int) -> List[int]:
    """The ring positions that probe position ``j`` (the inverse of :func:`probe_targets`)."""
    return [(j - s) % n for s in probe_offsets(n)]


def assign_probes(members: Sequence[Member]) -> Dict[int, Tuple[int, ...]]:
    """Member id -> the member ids it probes: the ring of :func:`probe_targets` over every
    joined member ordered by node rank (then join order), less the members that cannot be
    probed (no advertised address or no probe port; they still probe their targets)."""
    order = by_rank(members)
    probeable = {
        m.id for m in members if m.report.address is not None and m.report.probe_port is not None
    }
    ids = [m.id for m in order]
    return {
        ids[i]: tuple(ids[t] for t in targets if ids[t] in probeable)
        for i, targets in enumerate(probe_targets(len(ids)))
    }
