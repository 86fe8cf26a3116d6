"""A throw-away multi-node Slurm cluster built from network namespaces on this machine.

Topology (``P`` = prefix, ``N`` = number of nodes, ``i`` = node index)::

    root netns: three bridges, no addresses; "unreachable" routes for every test subnet
    P{i}m --- bridge PmgmtA (nodes 0..N/2-1) | bridge PmgmtB (nodes N/2..N-1)   10.77.0.0/16
    P{i}i --- bridge Pib (all nodes + ctl)                          10.78.0.0/16, fd00:78::/64

    netns Pnode{i}  hostname node{i}: mgmt 10.77.0.(B+i), ib 10.78.0.(B+i) + fd00:78::(B+i)
    netns Pctl      hostname ctl:     ib 10.78.0.250 + fd00:78::250; slurmctld; login node

``B`` is ``ib_base`` (default 10, at most 249 - N + 1); the IPv6 group repeats the decimal
digits. The controller's .250 lies above every possible node address.

Names (per-namespace ``/etc/netns/<ns>/hosts``): ``node{i}`` -> mgmt IPv4, ``node{i}i`` -> ib
IPv4, ``node{i}i6`` -> ib IPv6, ``ctl``. The two mgmt cells are L2-isolated, so node0's mgmt
address is unreachable from the second half of the nodes, while the ib network joins all.

Everything created is recorded in ``<workdir>/state.json`` *before* it is created, so
:meth:`Cluster.down` (or ``python -m tests.cluster.harness down`` from another process) can
always remove it. Run ``python -m tests.cluster.harness --help`` for the command line.
"""

# This module is the facade: the work is done in topology (names, addresses), namespaces
# (network, processes, teardown), slurm (configuration, daemons), faults, runs (commands on
# the login node and the nodes), state (the state file) and system (commands, /proc); the
# command line is in cli.

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Optional

from tests.cluster.faults import Faults
from tests.cluster.namespaces import Network, leftover_state
from tests.cluster.runs import Result, Runs, split_labeled
from tests.cluster.slurm import AUTHS, TASK_PLUGINS, Slurm, node_tmpdir, slurm_conf
from tests.cluster.state import WORKDIR_PREFIX, Ledger, find, read_state
from tests.cluster.system import ClusterError, ip, missing_requirements, pid_alive, tail
from tests.cluster.topology import IB_BASE, Layout, ib_ip, ib_ip6, mgmt_ip, route_metric

# what scenarios, fixtures and benchmarks import from here
__all__ = ["Cluster", "ClusterError", "Result", "discover", "free_prefix", "ib_ip", "ib_ip6"]
__all__ += ["mgmt_ip", "missing_requirements", "pid_alive", "route_metric", "split_labeled"]
__all__ += ["tail"]


class Cluster:
    """Slurm 22.05 cluster of ``nodes`` network namespaces; use as a context manager.

    ``python`` is the interpreter scenarios should run on the nodes (the harness itself only
    records it as :attr:`python`). ``auth`` is ``"none"`` (no munge needed) or ``"munge"``.
    ``workdir`` (default: a fresh ``/tmp/trjsc-cluster-*``) holds slurm.conf, logs, state,
    job output and the per-node ``TMPDIR`` (``tmp/node{i}``); it is removed by :meth:`down`
    unless ``keep_logs`` (default: env ``TRJSC_KEEP_CLUSTER_LOGS=1``). ``ib_base`` is the
    host number of node0's addresses (node ``i`` gets ``10.78.0.(ib_base+i)``); with
    ``ib_base=98`` and 4 nodes the IB addresses cross from two to three digits, so their
    string order differs from the node order. ``task_plugin="affinity"`` makes Slurm bind
    each task to the CPUs of its step (``TaskPlugin=task/affinity``, ``TaskPluginParam=Cores``;
    the nodes declare 2 CPUs); the default ``"none"`` leaves tasks unbound.
    """

    def __init__(
        self,
        nodes: int = 4,
        prefix: str = "trj",
        workdir: Optional[Path] = None,
        python: Optional[Path] = None,
        auth: str = "none",
        keep_logs: Optional[bool] = None,
        ib_base: int = IB_BASE,
        task_plugin: str = "none",
    ) -> None:
        self.layout = Layout(nodes=nodes, prefix=prefix, ib_base=ib_base)
        if auth not in AUTHS:
            raise ValueError("auth must be 'none' or 'munge'")
        if task_plugin not in TASK_PLUGINS:
            raise ValueError(f"task_plugin must be one of {TASK_PLUGINS}")
        self.python = Path(python or sys.executable)
        if keep_logs is None:
            keep_logs = os.environ.get("TRJSC_KEEP_CLUSTER_LOGS", "") not in ("", "0")
        self.keep_logs = keep_logs
        self._own_workdir = workdir is None
        self._ledger = Ledger(Path(workdir) if workdir else None)
        self._network = Network(self.layout, self._ledger)
        self._slurm = Slurm(self.layout, self._ledger, auth, task_plugin)
        self._faults = Faults(self.layout, self._ledger)
        self._runs = Runs(self.layout, self._ledger)
        self._prev_handlers: dict[int, Any] = {}
        self._guarded = False

    # ------------------------------------------------------------------ names
    @property
    def nodes(self) -> int:
        """Number of nodes."""
        return self.layout.nodes

    @property
    def prefix(self) -> str:
        """Prefix of every namespace, link and route metric of this cluster."""
        return self.layout.prefix

    @property
    def ib_base(self) -> int:
        """Host number of node0's addresses."""
        return self.layout.ib_base

    @property
    def auth(self) -> str:
        """Slurm authentication: ``"none"`` or ``"munge"``."""
        return self._slurm.auth

    @property
    def task_plugin(self) -> str:
        """Slurm task plugin: ``"none"`` or ``"affinity"``."""
        return self._slurm.task_plugin

    @property
    def workdir(self) -> Optional[Path]:
        """The cluster's workdir (``None`` until :meth:`up` made one)."""
        return self._ledger.workdir

    @workdir.setter
    def workdir(self, value: Optional[Path]) -> None:
        self._ledger.workdir = value

    @property
    def state(self) -> dict[str, Any]:
        """What the state file says: every resource created, daemon pids, frozen pids."""
        return self._ledger.data

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._ledger.data = value

    @property
    def ctl_ns(self) -> str:
        """Name of the controller/login namespace."""
        return self.layout.ctl_ns

    def node_ns(self, i: int) -> str:
        """Name of node ``i``'s network namespace."""
        return self.layout.node_ns(i)

    @property
    def hostnames(self) -> list[str]:
        """``["node0", "node1", ...]``."""
        return self.layout.hostnames

    @property
    def slurm_conf(self) -> Path:
        """Path of the generated slurm.conf."""
        return slurm_conf(self._ledger.wd)

    def node_tmpdir(self, i: int) -> Path:
        """TMPDIR of node ``i`` (set for node_exec and, via TaskProlog, for Slurm tasks)."""
        return node_tmpdir(self._ledger.wd, i)

    def mgmt_ip(self, i: int) -> str:
        """Management IPv4 address of node ``i`` (hostname ``node{i}``), honouring ib_base."""
        return self.layout.mgmt_ip(i)

    def ib_ip(self, i: int) -> str:
        """IB IPv4 address of node ``i`` (name ``node{i}i``), honouring ib_base."""
        return self.layout.ib_ip(i)

    def ib_ip6(self, i: int) -> str:
        """IB IPv6 address of node ``i`` (name ``node{i}i6``), honouring ib_base."""
        return self.layout.ib_ip6(i)

    def ib_names(self) -> set[str]:
        """Every name and address on the IB network (valid values for MASTER_ADDR)."""
        return self.layout.ib_names()

    # ------------------------------------------------------------------ state
    @classmethod
    def attach(cls, workdir: Path) -> Cluster:
        """A handle on a cluster brought up by another process, from its state file."""
        state = read_state(workdir)
        c = cls(
            nodes=state["nodes"],
            prefix=state["prefix"],
            workdir=Path(state["workdir"]),
            python=Path(state["python"]),
            auth=state["auth"],
            keep_logs=state.get("keep_logs", False),
            ib_base=state.get("ib_base", IB_BASE),
            task_plugin=state.get("task_plugin", "none"),
        )
        c._own_workdir = state.get("own_workdir", True)
        c.state = state
        return c

    @staticmethod
    def find(prefix: Optional[str] = None) -> list[Path]:
        """Workdirs of clusters (under the temp dir) whose state file matches ``prefix``."""
        return find(prefix)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self, guard: bool = True, timeout: float = 60.0) -> Cluster:
        """Build namespaces and network, start Slurm, wait until all nodes are idle.

        With ``guard`` (default), :meth:`down` also runs at interpreter exit and on
        SIGINT/SIGTERM/SIGHUP. On any error the partial cluster is torn down and the error
        re-raised.
        """
        if self.state.get("up"):
            return self
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state = {
            "version": 1,
            "prefix": self.prefix,
            "nodes": self.nodes,
            "auth": self.auth,
            "ib_base": self.ib_base,
            "task_plugin": self.task_plugin,
            "python": str(self.python),
            "workdir": str(self.workdir),
            "own_workdir": self._own_workdir,
            "keep_logs": self.keep_logs,
            "owner_pid": os.getpid() if guard else None,
            "metric": self.layout.metric,
            "created": time.time(),
            "routes": [],
            "netns": [],
            "links": [],
            "etc_netns": [],
            "pids": {},
        }
        self._ledger.save()
        if guard:
            self._install_guards()
        t0 = time.monotonic()
        try:
            self._network.claim_routes(self._remove_stale)  # first: the safety routes
            self._network.build()
            self._slurm.write_configs()
            self._slurm.start_daemons()
            self._slurm.wait_idle(timeout, lambda argv, t: self.login(argv, timeout=t))
        except BaseException:
            self.down()
            raise
        self.state["up"] = True
        self.state["up_seconds"] = round(time.monotonic() - t0, 2)
        self._ledger.save()
        return self

    def _remove_stale(self) -> bool:
        """Tear down clusters of our prefix whose owning process has died; True if any."""
        stale = []
        for w in find(self.prefix):
            if w == self.workdir:
                continue
            owner = read_state(w).get("owner_pid")
            if owner is None or pid_alive(owner):
                return False  # detached (command-line) cluster or a live owner: in use
            stale.append(w)
        for w in stale:
            print(f"[trjsc-cluster] removing stale cluster {w}", file=sys.__stderr__)
            Cluster.attach(w).down()
        return bool(stale)

    def _install_guards(self) -> None:
        if self._guarded:
            return
        self._guarded = True
        atexit.register(self.down)
        with contextlib.suppress(ValueError):  # only possible in the main thread
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # ignored on entry (a background job's SIGINT): stays ignored
                self._prev_handlers[sig] = signal.signal(sig, self._on_signal)

    def _remove_guards(self) -> None:
        if not self._guarded:
            return
        self._guarded = False
        atexit.unregister(self.down)
        with contextlib.suppress(ValueError):
            for sig, prev in self._prev_handlers.items():
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev)
        self._prev_handlers.clear()

    def _on_signal(self, sig: int, frame: Optional[FrameType]) -> None:
        prev = self._prev_handlers.get(sig, signal.SIG_DFL)
        self.down()
        if callable(prev):
            prev(sig, frame)
        elif prev == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    def pids(self) -> list[int]:
        """Live processes the harness is responsible for: its daemons + all in its namespaces."""
        return self._network.pids()

    def down(self) -> None:
        """Stop every process and remove everything ``up()`` created. Idempotent, never raises.

        Order: TERM (then KILL) the daemons and every process in the namespaces, delete
        namespaces, veths, bridges, /etc/netns entries, the unreachable routes, then the
        workdir (kept, with its path printed, when ``keep_logs``).
        """
        self._remove_guards()
        st = self.state
        if not st or st.get("down"):
            return
        # a second Ctrl-C must not interrupt the teardown: hold signals until it is done
        held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            with contextlib.suppress(Exception):  # never keeps the rest from being removed
                self._faults.heal()  # a partition (the namespaces' deletion would undo it too)
            self._network.teardown(self.keep_logs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    # ------------------------------------------------------------------ running things
    def login(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        timeout: float = 120.0,
    ) -> Result:
        """Run ``argv`` on the login node (netns ctl, SLURM_CONF set); see runs.Runs.login."""
        return self._runs.login(argv, env, timeout)

    def srun(
        self,
        argv: Sequence[str],
        nodes: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        srun_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> Result:
        """``srun -N<nodes> --ntasks-per-node=1 --label ...`` on ctl; see runs.Runs.srun."""
        return self._runs.srun(argv, nodes, env, srun_args, timeout)

    def cancel_all(self) -> None:
        """Cancel every job of this (private) cluster."""
        self._runs.cancel_all()

    def sbatch(
        self,
        script: Path,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        sbatch_args: Sequence[str] = (),
    ) -> str:
        """Submit ``script`` from the login node; returns the job id (see runs.Runs.sbatch)."""
        return self._runs.sbatch(script, args, env, sbatch_args)

    def job_output_path(self, jobid: str) -> Path:
        """Where :meth:`sbatch` sends the job's output."""
        return self._runs.job_output_path(jobid)

    def wait_job(self, jobid: str, timeout: float = 120.0) -> tuple[str, int]:
        """``(JobState, exit code)`` once the job has ended; see runs.Runs.wait_job."""
        return self._runs.wait_job(jobid, timeout)

    def node_exec(
        self,
        i: int,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        cwd: Optional[Path] = None,
        delay: float = 0.0,
    ) -> subprocess.Popen[str]:
        """Start ``argv`` on node ``i`` without Slurm; see runs.Runs.node_exec."""
        return self._runs.node_exec(i, argv, env, stdout, stderr, cwd, delay)

    def run_on_nodes(
        self,
        argv_per_node: Sequence[Sequence[str]],
        env_per_node: Optional[Sequence[Optional[Mapping[str, str]]]] = None,
        timeout: float = 120.0,
        nodes: Optional[Sequence[int]] = None,
        delays: Optional[Sequence[float]] = None,
    ) -> list[Result]:
        """Run one command per node in parallel; see runs.Runs.run_on_nodes."""
        return self._runs.run_on_nodes(argv_per_node, env_per_node, timeout, nodes, delays)

    # ------------------------------------------------------------------ faults
    def _node_procs(self, i: int) -> list[int]:
        """Node ``i``'s processes but the harness's daemons; see faults.Faults.node_procs."""
        return self._faults.node_procs(i)

    def signal_node(self, i: int, sig: int) -> list[int]:
        """Signal node ``i``'s processes but the daemons; see faults.Faults.signal_node."""
        return self._faults.signal_node(i, sig)

    def freeze_node(self, i: int, timeout: float = 5.0) -> list[int]:
        """SIGSTOP node ``i``'s processes but the daemons (a hung node), recorded for
        :meth:`thaw_node` and teardown; see faults.Faults.freeze_node."""
        return self._faults.freeze_node(i, timeout)

    def thaw_node(self, i: int) -> list[int]:
        """SIGCONT what :meth:`freeze_node` stopped on node ``i``; returns the pids."""
        return self._faults.thaw_node(i)

    def link_down(self, i: int) -> None:
        """Node ``i``'s ``ib`` interface down: a pulled cable; see faults.Faults.link_down."""
        self._faults.link_down(i)

    def link_up(self, i: int) -> None:
        """Undo :meth:`link_down`."""
        self._faults.link_up(i)

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Cut the IB network between ``groups`` of nodes (each still reaches ctl and its own
        group; packets across are lost without a trace); see faults.Faults.partition."""
        self._faults.partition(groups)

    def heal(self) -> None:
        """Undo :meth:`partition` (teardown does it too)."""
        self._faults.heal()

    def node_sysctl(self, i: int, key: str, value: Optional[object] = None) -> str:
        """Read, or set and read back, a ``net.*`` sysctl of node ``i``'s namespace; see
        faults.Faults.node_sysctl."""
        return self._faults.node_sysctl(i, key, value)


def free_prefix(base: str = "trj") -> str:
    """``base``, or ``base2``, ``base3``... if another live process runs a ``base`` cluster.

    A cluster whose owner process died counts as free: ``up()`` removes it. (Two processes
    picking at the same moment may still collide; ``up()`` then raises ClusterError.)
    """
    for n in range(1, 100):
        p = base if n == 1 else f"{base}{n}"
        metric = f"metric {route_metric(p)} "
        routes = ip("-4", "route", "show", "type", "unreachable", check=False).stdout
        if not Path(f"/run/netns/{p}ctl").exists() and metric not in routes.replace("\n", " "):
            return p
        owners = [read_state(w).get("owner_pid") for w in find(p)]
        if owners and all(o is not None and not pid_alive(o) for o in owners):
            return p
    raise ClusterError(f"no free cluster prefix for {base!r}")


def discover(prefix: str) -> Cluster:
    """A handle for tearing down leftovers of ``prefix`` when no state file exists."""
    c = Cluster(prefix=prefix, workdir=Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX)))
    assert c.workdir is not None
    c.state = leftover_state(c.layout, c.workdir)
    return c


if __name__ == "__main__":
    from tests.cluster.cli import main

    sys.exit(main())
