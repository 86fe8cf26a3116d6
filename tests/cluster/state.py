"""What a cluster has made: its state file and the processes this process started.

``<workdir>/state.json`` notes every resource *before* it is created, so teardown (also from
another process, see :meth:`Cluster.attach <tests.cluster.harness.Cluster.attach>`) can
always remove it.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from tests.cluster.system import ClusterError

WORKDIR_PREFIX = "trjsc-cluster-"
STATE_FILE = "state.json"


class Ledger:
    """The state of one cluster (``data``, saved to its state file) and its child processes.

    ``workdir`` is ``None`` until the cluster is brought up.
    """

    def __init__(self, workdir: Optional[Path]) -> None:
        self.workdir = workdir
        self.data: dict[str, Any] = {}
        self.children: list[subprocess.Popen[Any]] = []

    @property
    def wd(self) -> Path:
        """The workdir; ClusterError if there is none yet."""
        if self.workdir is None:
            raise ClusterError("cluster has no workdir (not up)")
        return self.workdir

    def save(self) -> None:
        """Write the state file (atomically: a reader never sees half of it)."""
        path = self.wd / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(path)

    def record(self, key: str, value: Any) -> None:
        """Note a resource in the state file *before* creating it."""
        self.data.setdefault(key, []).append(value)
        self.save()

    def track(self, p: subprocess.Popen[Any]) -> None:
        """Keep a child process so that it can be reaped."""
        self.children.append(p)

    def reap(self) -> None:
        """Collect the exit status of child processes that have ended."""
        for p in self.children:
            p.poll()


def read_state(workdir: Path) -> dict[str, Any]:
    """The state file of the cluster in ``workdir``."""
    state: dict[str, Any] = json.loads((Path(workdir) / STATE_FILE).read_text())
    return state


def find(prefix: Optional[str] = None) -> list[Path]:
    """Workdirs of clusters (under the temp dir) whose state file matches ``prefix``."""
    found = []
    pattern = os.path.join(tempfile.gettempdir(), WORKDIR_PREFIX + "*", STATE_FILE)
    for f in sorted(glob.glob(pattern)):
        try:
            st = json.loads(Path(f).read_text())
        except (OSError, ValueError):
            continue
        if not st.get("down") and (prefix is None or st.get("prefix") == prefix):
            found.append(Path(f).parent)
    return found
