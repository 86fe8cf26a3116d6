"""Fixtures for the namespace Slurm cluster (see tests/cluster/harness.py, docs/testing.md).

``cluster``: a session-wide 4-node cluster. ``make_cluster(nodes=...)``: other sizes, torn
down at the end of the session. Interpreter on the nodes: env ``TRJSC_CLUSTER_PYTHON``
(default: this interpreter). Cluster tests are skipped, with the reason, when not root or
when namespaces or Slurm binaries are missing.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Optional

import pytest

from tests.cluster.harness import Cluster, free_prefix, missing_requirements
from tests.cluster.recovery_jobs import SLOW
from tests.cluster.scenarios import Job
from torchrun_jsc.versions import TorchVersion

HERE = Path(__file__).resolve().parent
_why: list[str] | None = None
#: How many cluster scenarios this session skipped for :data:`_why` (counted as they report).
_skipped = 0
#: The start of the skip reason when the cluster cannot be built here.
SKIPPED_BECAUSE = "cluster tests: "
_kept: list[Path] = []


def node_python() -> Path:
    """Interpreter the scenarios run on the nodes."""
    return Path(os.environ.get("TRJSC_CLUSTER_PYTHON") or sys.executable)


def launcher_pythons() -> list[Path]:
    """Interpreters the torchrun_jsc scenarios run under: ``TRJSC_CLUSTER_PYTHONS``
    (colon-separated), else ``TRJSC_CLUSTER_PYTHON``, else this interpreter."""
    many = os.environ.get("TRJSC_CLUSTER_PYTHONS", "")
    found = [Path(p) for p in many.split(":") if p]
    return found or [node_python()]


@functools.cache
def torch_label(python: Path) -> str:
    """``torch2.13.0`` for the interpreter's torch (test ids), or ``torch?`` when unknown."""
    import subprocess

    try:
        out = subprocess.run(
            [str(python), "-c", "import torch; print(torch.__version__.split('+')[0])"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "torch?"
    return "torch" + out.stdout.strip() if out.returncode == 0 else "torch?"


def torch_version(python: Path) -> Optional[TorchVersion]:
    """The interpreter's torch release (None when unknown)."""
    label = torch_label(python)
    return None if label == "torch?" else TorchVersion.parse(label[len("torch") :])


def per_interpreter(item: pytest.Item) -> bool:
    """Whether a test runs once per launcher interpreter (depends on ``launcher_python``) in
    CI too: not one marked ``first_interpreter_in_ci`` (the matrix runs it per release)."""
    callspec = getattr(item, "callspec", None)
    if item.get_closest_marker("first_interpreter_in_ci") is not None:
        return False
    return callspec is not None and "launcher_python" in callspec.params


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _why
    mine = [it for it in items if Path(str(it.fspath)).resolve().is_relative_to(HERE)]
    if not mine:
        return
    if os.environ.get("TRJSC_CLUSTER_PER_INTERPRETER_ONLY", "") not in ("", "0"):
        # scripts/run-tests' second interpreter: the others already ran under the first.
        dropped = [it for it in mine if not per_interpreter(it)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [it for it in items if it not in dropped]
            mine = [it for it in mine if per_interpreter(it)]
    if _why is None:
        _why = missing_requirements()
    if _why:
        skip = pytest.mark.skip(reason=SKIPPED_BECAUSE + "; ".join(_why))
        for it in mine:
            it.add_marker(skip)
    if not SLOW:  # a test marked slow skips with its marker's reason
        for it in mine:
            slow = it.get_closest_marker("slow")
            if slow is not None:
                why = slow.kwargs.get("reason", "slow: TRJSC_SLOW_SCENARIOS=1")
                it.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def make_cluster() -> Iterator[Callable[..., Cluster]]:
    """Factory: ``make_cluster(nodes=16)`` returns a running cluster (down at session end)."""
    made: list[Cluster] = []

    def make(nodes: int = 4, prefix: str = "trj", **kw: object) -> Cluster:
        kw.setdefault("python", node_python())
        # a second pytest session beside this one (scripts/run-tests) takes other prefixes
        prefix += os.environ.get("TRJSC_CLUSTER_PREFIX_SUFFIX", "")
        c = Cluster(nodes=nodes, prefix=free_prefix(prefix), **kw)  # type: ignore[arg-type]
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


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _skipped
    if report.skipped and report.when == "setup":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        if reason.startswith("Skipped: " + SKIPPED_BECAUSE):
            _skipped += 1


def pytest_unconfigure(config: pytest.Config) -> None:
    """When cluster scenarios could not run here, the session's last line: how many, why, and
    (when root or Slurm is what is missing) how to run them."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not (_why and _skipped and reporter is not None):
        return
    line = f"{_skipped} cluster scenario{'s' * (_skipped != 1)} skipped ({'; '.join(_why)})"
    if any(w.startswith(("needs root", "missing Slurm")) for w in _why):
        line += ": as root, scripts/run-tests installs Slurm and munge with apt-get and runs them"
    reporter.write_line(line + " (docs/testing.md)")


@pytest.fixture(scope="session")
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    """A running 4-node cluster shared by the whole session."""
    return make_cluster(nodes=4)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "launcher_python" in metafunc.fixturenames:
        pythons = launcher_pythons()
        metafunc.parametrize(
            "launcher_python", pythons, ids=[torch_label(p) for p in pythons], scope="session"
        )


@pytest.fixture(scope="session")
def jsc_cluster(make_cluster: Callable[..., Cluster], launcher_python: Path) -> Cluster:
    """A running 4-node cluster whose nodes run ``launcher_python`` (one per interpreter)."""
    return make_cluster(nodes=4, prefix="trjl", python=launcher_python)


@pytest.fixture(scope="session")
def main_cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    """A running 4-node cluster on the first launcher interpreter only: for scenarios whose
    outcome does not depend on the torch version (explain, guards, failing preflights)."""
    return make_cluster(nodes=4, prefix="trjm", python=launcher_pythons()[0])


@pytest.fixture(scope="session")
def five_cluster(make_cluster: Callable[..., Cluster], launcher_python: Path) -> Cluster:
    """A running 5-node cluster whose nodes run ``launcher_python``: four train, one spare."""
    return make_cluster(nodes=5, prefix="trjr", python=launcher_python)


@pytest.fixture
def job_cleanup() -> Iterator[list[Job]]:
    """The jobs a scenario started (it appends them): stopped at its end, whatever happened."""
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        job.stop()
