"""Fixtures for the namespace Slurm cluster (see tests/cluster/harness.py, docs/testing.md).

``cluster``: a session-wide 4-node cluster. ``make_cluster(nodes=...)``: other sizes, torn
down at the end of the session. Interpreter on the nodes: env ``TRJSC_CLUSTER_PYTHON``
(default: this interpreter). Cluster tests are skipped, with the reason, when not root or
when namespaces or Slurm binaries are missing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from tests.cluster.harness import Cluster, free_prefix, missing_requirements

HERE = Path(__file__).resolve().parent
_why: list[str] | None = None
_kept: list[Path] = []


def node_python() -> Path:
    """Interpreter the scenarios run on the nodes."""
    return Path(os.environ.get("TRJSC_CLUSTER_PYTHON") or sys.executable)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _why
    mine = [it for it in items if Path(str(it.fspath)).resolve().is_relative_to(HERE)]
    if not mine:
        return
    if _why is None:
        _why = missing_requirements()
    if _why:
        skip = pytest.mark.skip(reason="cluster tests: " + "; ".join(_why))
        for it in mine:
            it.add_marker(skip)


@pytest.fixture(scope="session")
def make_cluster() -> Iterator[Callable[..., Cluster]]:
    """Factory: ``make_cluster(nodes=16)`` returns a running cluster (down at session end)."""
    made: list[Cluster] = []

    def make(nodes: int = 4, prefix: str = "trj", **kw: object) -> Cluster:
        c = Cluster(nodes=nodes, prefix=free_prefix(prefix), python=node_python(), **kw)  # type: ignore[arg-type]
        made.append(c)
        return c.up()

    try:
        yield make
    finally:
        for c in reversed(made):
            c.down()
            if c.keep_logs and c.workdir is not None:
                _kept.append(c.workdir)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for w in _kept:
        terminalreporter.write_line(f"cluster logs kept (TRJSC_KEEP_CLUSTER_LOGS=1): {w}")


@pytest.fixture(scope="session")
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    """A running 4-node cluster shared by the whole session."""
    return make_cluster(nodes=4)
