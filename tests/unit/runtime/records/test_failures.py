"""This node's record from torch's run result: the first failing rank, and the ranks that
ended the same way with it."""

from __future__ import annotations

import calendar
import signal
from types import SimpleNamespace
from typing import Any, Dict, Tuple

import pytest

from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.records import failures

NOON = calendar.timegm((2026, 11, 30, 12, 0, 0))
USR1, TERM = -int(signal.SIGUSR1), -int(signal.SIGTERM)


def _result(workers: Workers, codes: Dict[int, Tuple[int, float]]) -> Any:
    """Ranks -> (exit code, when it ended); every exit noted by the worker registry."""
    found = {}
    for rank, (code, at) in codes.items():
        pid = 5000 + rank
        workers._procs[pid] = SimpleNamespace(pid=pid, returncode=code)
        workers._exits[pid] = NOON + at
        found[rank] = SimpleNamespace(
            pid=pid, exitcode=code, local_rank=rank, error_file="", timestamp=int(NOON)
        )
    return SimpleNamespace(failures=found)


@pytest.mark.parametrize(
    "codes, root, alike",
    [
        ({0: (USR1, 0.0), 1: (USR1, 0.01)}, 0, 1),  # one SIGUSR1 killed both
        ({0: (USR1, 0.0), 1: (TERM, 0.2)}, 0, 0),  # torch stopped rank 1 after rank 0 died
        ({0: (TERM, 0.0), 1: (TERM, 0.01)}, 0, 0),  # SIGTERM: torch's own stop, never alike
        ({0: (1, 0.5), 1: (1, 0.0), 2: (1, 0.3)}, 1, 2),  # the same error on every rank
        ({0: (1, 0.0), 1: (1, 3.0)}, 0, 0),  # the same code, seconds apart: after it
    ],
)
def test_ranks_that_ended_the_same_way(
    codes: Dict[int, Tuple[int, float]], root: int, alike: int
) -> None:
    group = SimpleNamespace(workers=[object()] * len(codes))
    workers = Workers()
    record = failures.from_result(workers, "node0", 0, group, _result(workers, codes))
    assert (record.rank, record.alike, record.ranks_ended) == (root, alike, len(codes))
    assert record.exitcode == codes[root][0]
