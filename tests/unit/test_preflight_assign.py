"""Which peers each node probes (preflight/assign.py): bounded, covering, deterministic.

Pure: no sockets. The assignment is a circulant graph (position i probes i + s mod N for each
offset s), so the invariants for every N follow from the offsets; they are checked for every N
from 1 to 5,000 at once with numpy, and ``probe_targets`` itself against them for many N."""

from __future__ import annotations

import random
from typing import List, Optional

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchrun_jsc.preflight.assign import (
    MAX_PROBES,
    assign_probes,
    probe_offsets,
    probe_targets,
    probers_of,
)
from torchrun_jsc.preflight.report import Member, NodeReport

LARGEST = 5000


def test_bound_is_the_issues() -> None:
    assert MAX_PROBES == 8


@pytest.mark.parametrize(
    ("n", "offsets"),
    [
        (0, []),
        (1, []),
        (2, [1]),
        (3, [1, 2]),
        (4, [1, 3, 2]),
        (5, [1, 4, 2, 3]),
        (6, [1, 5, 2, 4]),
        (100, [1, 99, 10, 90, 33, 67]),
        (4096, [1, 4095, 64, 4032, 1365, 2731]),
    ],
)
def test_offsets(n: int, offsets: List[int]) -> None:
    assert probe_offsets(n) == offsets


def test_every_size_up_to_5000() -> None:
    """For every N: no self-probe, no node probes more than the bound or is probed by more
    than 8, every node is probed by at least min(2, N-1) others."""
    for n in range(1, LARGEST + 1):
        offsets = probe_offsets(n)
        assert len(set(offsets)) == len(offsets), n
        assert all(0 < s < n for s in offsets), n  # no self-probe, each target once
        assert min(2, n - 1) <= len(offsets) <= MAX_PROBES, n
        if n <= 5:
            assert sorted(offsets) == list(range(1, n)), "small jobs: every pair"
    # the whole target table of every N, in-degrees counted (numpy: half a second in all)
    positions = np.arange(LARGEST, dtype=np.int64)
    for n in range(1, LARGEST + 1):
        offsets = np.array(probe_offsets(n), dtype=np.int64)
        targets = (positions[:n, None] + offsets) % n
        assert not np.any(targets == positions[:n, None]), n
        indegree = np.bincount(targets.ravel(), minlength=n)
        assert np.all(indegree == len(offsets)), "probed by exactly as many as it probes"
        assert np.all(indegree >= min(2, n - 1)) and np.all(indegree <= MAX_PROBES), n


def check_table(n: int, targets: List[List[int]]) -> None:
    assert len(targets) == n
    offsets = probe_offsets(n)
    indegree = [0] * n
    for i, row in enumerate(targets):
        assert row == [(i + s) % n for s in offsets]
        assert i not in row and len(set(row)) == len(row)
        for t in row:
            indegree[t] += 1
    assert all(min(2, n - 1) <= d <= MAX_PROBES for d in indegree)


@pytest.mark.parametrize("n", [*range(1, 130), 1000, 4096, 4999, LARGEST])
def test_probe_targets(n: int) -> None:
    targets = probe_targets(n)
    check_table(n, targets)
    assert probe_targets(n) == targets, "deterministic"


@given(st.integers(1, 6000), st.data())
def test_probers_of_is_the_inverse(n: int, data: st.DataObject) -> None:
    j = data.draw(st.integers(0, n - 1))
    offsets = probe_offsets(n)
    probers = probers_of(n, j)
    assert len(probers) == len(offsets)
    assert all((p + s) % n == j for p, s in zip(probers, offsets))


def node(i: int, rank: Optional[int], address: Optional[str] = "10.0.0.1") -> Member:
    port = None if address is None else 40000 + i
    return Member(i, NodeReport(f"n{rank if rank is not None else i}", rank, False, address, port))


def test_assignment_follows_node_rank_not_join_order() -> None:
    ranks = list(range(40))
    shuffled = ranks[:]
    random.Random(7).shuffle(shuffled)
    members = [node(i, r) for i, r in enumerate(shuffled)]  # id = join order
    assignment = assign_probes(members)
    rank_of = {m.id: m.report.node_rank for m in members}
    by_rank = {rank_of[i]: sorted(rank_of[t] for t in ts) for i, ts in assignment.items()}
    table = probe_targets(40)
    assert by_rank == {r: sorted(table[r]) for r in ranks}
    assert assign_probes(list(reversed(members))) == assignment, "same joined nodes, same result"


def test_unprobeable_nodes_probe_but_are_not_probed() -> None:
    members = [node(i, i, None if i == 3 else "10.0.0.1") for i in range(12)]
    members[5] = Member(5, NodeReport("n5", 5, False, "10.0.0.5", None))  # no probe port
    assignment = assign_probes(members)
    assert all(3 not in ts and 5 not in ts for ts in assignment.values())
    table = probe_targets(12)
    assert assignment[3] == tuple(t for t in table[3] if t not in (3, 5))
    probed = [t for ts in assignment.values() for t in ts]
    for i in set(range(12)) - {3, 5}:
        assert probed.count(i) == len(probe_offsets(12)), "the others keep every prober"


def test_one_node_probes_nothing() -> None:
    assert assign_probes([node(0, 0)]) == {0: ()}
    assert assign_probes([]) == {}
