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

from __future__ import annotations

import argparse
import atexit
import contextlib
import glob
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Optional

MGMT_NET = "10.77.0.0/16"
IB_NET = "10.78.0.0/16"
IB6_NET = "fd00:78::/64"
SUBNETS = (MGMT_NET, IB_NET, IB6_NET)
IB_BASE = 10  # default host number of node0 (node i is .(IB_BASE+i))
MAX_HOST_INDEX = 249  # highest node host number; the controller is above every node
CTL_HOST_INDEX = 250
MAX_NODES = 64
WORKDIR_PREFIX = "trjsc-cluster-"
STATE_FILE = "state.json"
JOBS_DIR = Path(__file__).resolve().parent / "jobs"
SLURM_BINARIES = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo", "scontrol")
TASK_PLUGINS = ("none", "affinity")
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or is in use by someone else."""


def mgmt_ip(i: int, base: int = IB_BASE) -> str:
    """Management IPv4 address of node ``i`` (hostname ``node{i}``)."""
    return f"10.77.0.{base + i}"


def ib_ip(i: int, base: int = IB_BASE) -> str:
    """InfiniBand IPv4 address of node ``i`` (name ``node{i}i``)."""
    return f"10.78.0.{base + i}"


def ib_ip6(i: int, base: int = IB_BASE) -> str:
    """InfiniBand IPv6 address of node ``i`` (name ``node{i}i6``).

    The last group is the IPv4 host number's decimal digits read as hex text (``.98`` ->
    ``::98``, ``.100`` -> ``::100``), so the two addresses look alike.
    """
    return f"fd00:78::{base + i}"


CTL_IP = f"10.78.0.{CTL_HOST_INDEX}"
CTL_IP6 = f"fd00:78::{CTL_HOST_INDEX}"


def route_metric(prefix: str) -> int:
    """Metric of this prefix's root-namespace unreachable routes (tells clusters apart)."""
    return 1000 + zlib.crc32(prefix.encode()) % 60000


def find_binary(name: str) -> Optional[str]:
    """Path of a (Slurm/system) binary, also looking in sbin directories."""
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def missing_requirements() -> list[str]:
    """Why a cluster cannot be built here (empty if it can): root, namespaces, binaries."""
    why: list[str] = []
    if os.geteuid() != 0:
        why.append(f"needs root (euid {os.geteuid()})")
        return why
    for tool in ("ip", "unshare", "hostname", "setsid"):
        if not find_binary(tool):
            why.append(f"missing tool {tool!r}")
    missing = [b for b in SLURM_BINARIES if not find_binary(b)]
    if missing:
        why.append("missing Slurm binaries: " + ", ".join(missing))
    if not why:
        probe = subprocess.run(
            ["unshare", "--net", "--uts", "true"], capture_output=True, text=True, check=False
        )
        if probe.returncode != 0:
            why.append(f"cannot create network namespaces: {probe.stderr.strip()}")
    return why


class Result(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A finished command: ``returncode``, ``stdout``, ``stderr`` plus the fields below.

    ``name`` is where it ran (``"login"`` or ``"node2"``), ``elapsed`` the wall time in
    seconds and ``timed_out`` whether the harness had to kill it.
    """

    def __init__(
        self,
        args: Sequence[str],
        returncode: int,
        stdout: str,
        stderr: str,
        *,
        name: str,
        elapsed: float,
        timed_out: bool = False,
    ) -> None:
        super().__init__(list(args), returncode, stdout, stderr)
        self.name = name
        self.elapsed = elapsed
        self.timed_out = timed_out

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return (self.stdout or "") + (self.stderr or "")


def tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and r.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _disable_ipv6(ifname: str) -> None:
    """No link-local addresses on root-namespace ends of the test network."""
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _proc_state(pid: int) -> str:
    """One-letter state of ``pid`` from /proc (``"T"`` stopped, ``"S"`` sleeping...), or ``""``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[0]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _is_stepd(pid: int) -> bool:
    """A slurmstepd (its title is ``slurmstepd: [job.step]``); it ignores SIGTERM."""
    return _cmdline(pid).startswith("slurmstepd")


def _clean_env(extra: Optional[Mapping[str, str]]) -> dict[str, str]:
    """Our environment without anything a surrounding Slurm job or launcher set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SLURMD_", "PMI_", "PMIX_", "TORCHELASTIC_"))
        and k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    }
    env.update(extra or {})
    return env


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
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix must match {_PREFIX_RE.pattern}: {prefix!r}")
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes must be in 1..{MAX_NODES}")
        if auth not in ("none", "munge"):
            raise ValueError("auth must be 'none' or 'munge'")
        if task_plugin not in TASK_PLUGINS:
            raise ValueError(f"task_plugin must be one of {TASK_PLUGINS}")
        if ib_base < 1 or ib_base + nodes - 1 > MAX_HOST_INDEX:
            raise ValueError(
                f"ib_base must be >= 1 and ib_base + nodes - 1 <= {MAX_HOST_INDEX} "
                f"(got ib_base={ib_base}, nodes={nodes})"
            )
        self.nodes = nodes
        self.ib_base = ib_base
        self.task_plugin = task_plugin
        self.prefix = prefix
        self.python = Path(python or sys.executable)
        self.auth = auth
        if keep_logs is None:
            keep_logs = os.environ.get("TRJSC_KEEP_CLUSTER_LOGS", "") not in ("", "0")
        self.keep_logs = keep_logs
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else None
        self.state: dict[str, Any] = {}
        self._children: list[subprocess.Popen[Any]] = []
        self._prev_handlers: dict[int, Any] = {}
        self._guarded = False
        self._counter = 0

    # ------------------------------------------------------------------ names
    @property
    def ctl_ns(self) -> str:
        """Name of the controller/login namespace."""
        return f"{self.prefix}ctl"

    def node_ns(self, i: int) -> str:
        """Name of node ``i``'s network namespace."""
        return f"{self.prefix}node{i}"

    @property
    def hostnames(self) -> list[str]:
        """``["node0", "node1", ...]``."""
        return [f"node{i}" for i in range(self.nodes)]

    @property
    def slurm_conf(self) -> Path:
        """Path of the generated slurm.conf."""
        return self._wd / "etc" / "slurm.conf"

    def node_tmpdir(self, i: int) -> Path:
        """TMPDIR of node ``i`` (set for node_exec and, via TaskProlog, for Slurm tasks)."""
        return self._wd / "tmp" / f"node{i}"

    def mgmt_ip(self, i: int) -> str:
        """Management IPv4 address of node ``i`` (hostname ``node{i}``), honouring ib_base."""
        return mgmt_ip(i, self.ib_base)

    def ib_ip(self, i: int) -> str:
        """IB IPv4 address of node ``i`` (name ``node{i}i``), honouring ib_base."""
        return ib_ip(i, self.ib_base)

    def ib_ip6(self, i: int) -> str:
        """IB IPv6 address of node ``i`` (name ``node{i}i6``), honouring ib_base."""
        return ib_ip6(i, self.ib_base)

    def ib_names(self) -> set[str]:
        """Every name and address on the IB network (valid values for MASTER_ADDR)."""
        names = {CTL_IP, CTL_IP6}
        for i in range(self.nodes):
            names |= {f"node{i}i", f"node{i}i6", self.ib_ip(i), self.ib_ip6(i)}
        return names

    @property
    def _wd(self) -> Path:
        if self.workdir is None:
            raise ClusterError("cluster has no workdir (not up)")
        return self.workdir

    def _bridges(self) -> list[str]:
        return [f"{self.prefix}mgmtA", f"{self.prefix}mgmtB", f"{self.prefix}ib"]

    def _hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for i in range(self.nodes):
            lines += [
                f"{self.mgmt_ip(i)} node{i}",
                f"{self.ib_ip(i)} node{i}i",
                f"{self.ib_ip6(i)} node{i}i6",
            ]
        lines += [f"{CTL_IP} ctl", f"{CTL_IP6} ctl6"]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ state
    def _save(self) -> None:
        path = self._wd / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(path)

    def _record(self, key: str, value: Any) -> None:
        """Note a resource in the state file *before* creating it."""
        self.state.setdefault(key, []).append(value)
        self._save()

    @classmethod
    def attach(cls, workdir: Path) -> Cluster:
        """A handle on a cluster brought up by another process, from its state file."""
        state = json.loads((Path(workdir) / STATE_FILE).read_text())
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
            "metric": route_metric(self.prefix),
            "created": time.time(),
            "routes": [],
            "netns": [],
            "links": [],
            "etc_netns": [],
            "pids": {},
        }
        self._save()
        if guard:
            self._install_guards()
        t0 = time.monotonic()
        try:
            self._claim_routes()
            self._build_network()
            self._write_configs()
            self._start_daemons()
            self._wait_idle(timeout)
        except BaseException:
            self.down()
            raise
        self.state["up"] = True
        self.state["up_seconds"] = round(time.monotonic() - t0, 2)
        self._save()
        return self

    def _claim_routes(self) -> None:
        """Safety first: unreachable routes for every test subnet in the root namespace.

        ``ip route add`` (not replace) with a per-prefix metric also claims the prefix: it
        fails if a cluster with the same prefix exists.
        """
        metric = str(self.state["metric"])
        for net in SUBNETS:
            fam = "-6" if ipaddress.ip_network(net).version == 6 else "-4"
            r = _ip(fam, "route", "add", "unreachable", net, "metric", metric, check=False)
            if r.returncode != 0 and not self.state["routes"] and self._remove_stale():
                r = _ip(fam, "route", "add", "unreachable", net, "metric", metric, check=False)
            if r.returncode != 0:
                holders = [str(w) for w in self.find(self.prefix) if w != self.workdir]
                raise ClusterError(
                    f"prefix {self.prefix!r} is in use (route {net} metric {metric}: "
                    f"{r.stderr.strip()}); clusters: {holders or 'no state file found'}; "
                    f"remove with: python -m tests.cluster.harness down --prefix {self.prefix}"
                )
            self._record("routes", [fam, net, metric])

    def _remove_stale(self) -> bool:
        """Tear down clusters of our prefix whose owning process has died; True if any."""
        stale = []
        for w in self.find(self.prefix):
            if w == self.workdir:
                continue
            owner = json.loads((w / STATE_FILE).read_text()).get("owner_pid")
            if owner is None or pid_alive(owner):
                return False  # detached (command-line) cluster or a live owner: in use
            stale.append(w)
        for w in stale:
            print(f"[trjsc-cluster] removing stale cluster {w}", file=sys.__stderr__)
            Cluster.attach(w).down()
        return bool(stale)

    def _add_ns(self, ns: str) -> None:
        self._record("netns", ns)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        etc = Path("/etc/netns")
        if not etc.exists():
            self.state["created_etc_netns"] = True
        self._record("etc_netns", str(etc / ns))
        _write(etc / ns / "hosts", self._hosts_file())
        _write(etc / ns / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def _add_if(self, ns: str, ifname: str, host_end: str, bridge: str, addrs: list[str]) -> None:
        self._record("links", host_end)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ifname, "netns", ns)
        _disable_ipv6(host_end)
        _ip("link", "set", host_end, "master", bridge, "up")
        for a in addrs:
            extra = ["nodad"] if ":" in a else []
            _ip("-n", ns, "addr", "add", a, "dev", ifname, *extra)
        _ip("-n", ns, "link", "set", ifname, "up")

    def _build_network(self) -> None:
        for br in self._bridges():
            self._record("links", br)
            _ip("link", "add", br, "type", "bridge")
            _disable_ipv6(br)
            _ip("link", "set", br, "up")
        mgmt_a, mgmt_b, ib = self._bridges()
        for i in range(self.nodes):
            ns = self.node_ns(i)
            self._add_ns(ns)
            cell = mgmt_a if i < self.nodes // 2 or self.nodes == 1 else mgmt_b
            self._add_if(ns, "mgmt", f"{self.prefix}{i}m", cell, [self.mgmt_ip(i) + "/16"])
            ib_addrs = [self.ib_ip(i) + "/16", self.ib_ip6(i) + "/64"]
            self._add_if(ns, "ib", f"{self.prefix}{i}i", ib, ib_addrs)
        self._add_ns(self.ctl_ns)
        self._add_if(self.ctl_ns, "ib", f"{self.prefix}ci", ib, [CTL_IP + "/16", CTL_IP6 + "/64"])

    def _write_configs(self) -> None:
        wd = self._wd
        for sub in ("etc", "log", "run", "out", "state/ctld", "tmp/ctl"):
            (wd / sub).mkdir(parents=True, exist_ok=True)
        for i in range(self.nodes):
            self.node_tmpdir(i).mkdir(parents=True, exist_ok=True)
            (wd / "state" / f"slurmd-node{i}").mkdir(parents=True, exist_ok=True)
        if self.auth == "munge":
            auth = self._start_munge()
        else:
            auth = "AuthType=auth/none\nCredType=cred/none\n"
        prolog = wd / "etc" / "task_prolog.sh"
        # Slurm tasks inherit the caller's env; give each node its own TMPDIR instead.
        _write(prolog, f'#!/bin/sh\necho "export TMPDIR={wd}/tmp/$(hostname)"\n', 0o755)
        if self.task_plugin == "affinity":
            # Bind to cores by default: each namespace node has one socket, and Slurm's
            # automatic binding gives one task per node the whole socket (every CPU), which
            # would hide a step that was given fewer CPUs than SLURM_CPUS_PER_TASK says.
            task = "TaskPlugin=task/affinity\nTaskPluginParam=Cores\n"
        else:
            task = "TaskPlugin=task/none\n"
        last = self.nodes - 1
        addrs = ",".join(f"node{i}i" for i in range(self.nodes))
        conf = f"""\
ClusterName={self.prefix}
SlurmctldHost=ctl({CTL_IP})
SlurmUser=root
SlurmdUser=root
{auth}MpiDefault=none
ProctrackType=proctrack/linuxproc
{task}TaskProlog={prolog}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation={wd}/state/ctld
SlurmctldPidFile={wd}/run/slurmctld.pid
SlurmctldLogFile={wd}/log/slurmctld.log
SlurmdSpoolDir={wd}/state/slurmd-%n
SlurmdPidFile={wd}/run/slurmd-%n.pid
SlurmdLogFile={wd}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=node[0-{last}] NodeAddr={addrs} NodeHostname=node[0-{last}] CPUs=2 Boards=1 \
SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        _write(self.slurm_conf, conf)
        # slurmd always loads a cgroup plugin; `ip netns exec` hides /sys/fs/cgroup, so
        # autodetection fails. Naming the plugin skips it (nothing uses cgroups here).
        _write(wd / "etc" / "cgroup.conf", "CgroupPlugin=cgroup/v1\n")

    def _start_munge(self) -> str:
        m = self._wd / "munge"
        for sub in ("etc", "run", "log", "lib"):
            (m / sub).mkdir(parents=True, exist_ok=True)
        key = m / "etc" / "munge.key"
        _run(["mungekey", "-c", "-k", str(key)])
        _run(["chown", "-R", "munge:munge", str(m)])
        for sub in ("etc", "log", "lib"):
            (m / sub).chmod(0o700)
        m.chmod(0o755)
        (m / "run").chmod(0o755)
        key.chmod(0o400)
        self._wd.chmod(0o755)  # munged (user munge) must traverse the workdir
        sock = m / "run" / "munge.socket.2"
        argv = [
            "setpriv",
            "--reuid=munge",
            "--regid=munge",
            "--init-groups",
            "--",
            find_binary("munged") or "munged",
            "-F",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--log-file={m}/log/munged.log",
            f"--pid-file={m}/run/munged.pid",
            f"--seed-file={m}/lib/munged.seed",
        ]
        self._spawn("munged", argv)
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise ClusterError("munged did not start:\n" + self._log_tails())
            time.sleep(0.05)
        return f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n"

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self._wd / "log" / f"{name}.stdout", "ab")  # noqa: SIM115
        env = _clean_env({"SLURM_CONF": str(self.slurm_conf), "TMPDIR": str(self._wd / "tmp")})
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        self._children.append(p)
        self.state["pids"][name] = p.pid
        self._save()

    def _in_ns(self, ns: str, hostname: str, argv: Sequence[str], delay: float = 0.0) -> list[str]:
        """argv that runs ``argv`` in netns ``ns`` with its own UTS hostname (all exec()),
        after sleeping ``delay`` seconds in the namespace."""
        if delay < 0:
            raise ValueError(f"delay must be >= 0: {delay}")
        pause = f" && sleep {float(delay):.3f}" if delay else ""
        return [
            "ip",
            "netns",
            "exec",
            ns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname "$0"{pause} && exec "$@"',
            hostname,
            *argv,
        ]

    def _start_daemons(self) -> None:
        conf = str(self.slurm_conf)
        ctld = find_binary("slurmctld") or "slurmctld"
        slurmd = find_binary("slurmd") or "slurmd"
        self._spawn("slurmctld", self._in_ns(self.ctl_ns, "ctl", [ctld, "-D", "-i", "-f", conf]))
        for i in range(self.nodes):
            argv = self._in_ns(self.node_ns(i), f"node{i}", [slurmd, "-D", "-f", conf])
            self._spawn(f"slurmd-node{i}", argv)

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            for name, pid in self.state["pids"].items():
                if not pid_alive(pid):
                    raise ClusterError(f"{name} exited during start-up:\n" + self._log_tails())
            r = self.login(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], timeout=10)
            out = r.stdout
            if r.returncode == 0 and len(set(out.split())) == self.nodes:
                return
            time.sleep(0.2)
        raise ClusterError(
            f"nodes not idle after {timeout:.0f}s (idle: {out.split()}):\n" + self._log_tails()
        )

    def _log_tails(self, lines: int = 15) -> str:
        parts = []
        for f in sorted((self._wd / "log").glob("*")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {f.name}\n{tail(f.read_text(errors='replace'), lines)}")
        return "\n".join(parts)

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
        pids: set[int] = set()
        wd = self.state.get("workdir", "")
        for pid in self.state.get("pids", {}).values():
            if pid_alive(pid) and wd and wd in _cmdline(pid):  # guards against PID reuse
                pids.add(pid)
        for ns in self.state.get("netns", []):
            r = _ip("netns", "pids", ns, check=False)
            pids |= {int(p) for p in r.stdout.split() if p.isdigit()}
        pids.discard(os.getpid())
        return sorted(p for p in pids if pid_alive(p))

    def _reap(self) -> None:
        for p in self._children:
            p.poll()

    def _continue_stopped(self) -> None:
        """SIGCONT frozen processes (a stopped process acts on SIGTERM only once continued).

        Only processes that are still ours (in :meth:`pids`) are touched: the ones
        :meth:`freeze_node` recorded, and any other of ours that is stopped.
        """
        ours = set(self.pids())
        frozen = {p for pids in self.state.get("frozen", {}).values() for p in pids}
        for pid in sorted(ours):
            if pid in frozen or _proc_state(pid) == "T":
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)

    def _kill_all(self, grace: float = 5.0) -> None:
        self._continue_stopped()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                self._reap()
                pids = [p for p in pids if pid_alive(p)]
                if sig == signal.SIGTERM and all(_is_stepd(p) for p in pids):
                    break  # slurmstepd ignores SIGTERM: no use waiting, KILL comes next
                time.sleep(0.05)
            if not self.pids():
                break
        self._reap()

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
            self._teardown(st)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    def _teardown(self, st: dict[str, Any]) -> None:
        errors: list[str] = []
        try:
            self._kill_all()
        except Exception as e:  # keep tearing down whatever happens
            errors.append(f"kill: {e}")
        for ns in reversed(st.get("netns", [])):
            _ip("netns", "del", ns, check=False)
        for link in reversed(st.get("links", [])):
            if Path(f"/sys/class/net/{link}").exists():
                r = _ip("link", "del", link, check=False)
                if r.returncode != 0 and "Cannot find device" not in r.stderr:
                    errors.append(r.stderr.strip())
        for d in st.get("etc_netns", []):
            shutil.rmtree(d, ignore_errors=True)
        if st.get("created_etc_netns"):
            with contextlib.suppress(OSError):
                os.rmdir("/etc/netns")  # only if empty
        for fam, net, metric in st.get("routes", []):
            _ip(fam, "route", "del", "unreachable", net, "metric", str(metric), check=False)
        st["routes"], st["netns"], st["links"], st["etc_netns"] = [], [], [], []
        st["down"], st["up"] = True, False
        wd = Path(st["workdir"])
        if self.keep_logs or not st.get("own_workdir", True):
            with contextlib.suppress(OSError):
                self._save()
            if self.keep_logs:
                print(f"[trjsc-cluster] logs kept in {wd}", file=sys.__stderr__, flush=True)
        else:
            shutil.rmtree(wd, ignore_errors=True)
        if errors:
            print(f"[trjsc-cluster] teardown problems: {errors}", file=sys.__stderr__)

    # ------------------------------------------------------------------ running things
    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def _wait(
        self, procs: list[tuple[str, subprocess.Popen[Any], list[str]]], timeout: float
    ) -> list[bool]:
        """Wait for all; on timeout TERM then KILL the process groups still running."""
        deadline = time.monotonic() + timeout
        timed_out = [False] * len(procs)
        for k, (_, p, _) in enumerate(procs):
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out[k] = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            running = [p for (_, p, _), t in zip(procs, timed_out) if t and p.poll() is None]
            for p in running:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, sig)  # the session node_exec/login created
            for p in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)
        return timed_out

    def login(
        self,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        timeout: float = 120.0,
    ) -> Result:
        """Run ``argv`` on the login node (netns ctl, hostname ctl, SLURM_CONF set).

        ``env`` is added to this process's environment (minus SLURM_*/launcher variables).
        On timeout the command's process group is killed and ``timed_out`` is set.
        """
        env = _clean_env(
            {
                "SLURM_CONF": str(self.slurm_conf),
                "TMPDIR": str(self._wd / "tmp" / "ctl"),
                **(env or {}),
            }
        )
        full = self._in_ns(self.ctl_ns, "ctl", argv)
        t0 = time.monotonic()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
                text=True,
            )
            [to] = self._wait([("login", p, list(argv))], timeout)
            out.seek(0)
            err.seek(0)
            return Result(
                argv,
                p.returncode,
                out.read(),
                err.read(),
                name="login",
                elapsed=time.monotonic() - t0,
                timed_out=to,
            )

    def srun(
        self,
        argv: Sequence[str],
        nodes: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        srun_args: Sequence[str] = (),
        timeout: float = 120.0,
    ) -> Result:
        """``srun -N<nodes> --ntasks-per-node=1 --label <srun_args> <argv>`` on the login node.

        Output lines are prefixed ``"<task id>: "`` (see :func:`split_labeled`). Each task
        gets ``env`` (srun exports the caller's environment) and its node's TMPDIR.
        """
        n = self.nodes if nodes is None else nodes
        cmd = ["srun", f"-N{n}", "--ntasks-per-node=1", "--label", *srun_args, *argv]
        r = self.login(cmd, env=env, timeout=timeout)
        if r.timed_out:
            self.cancel_all()
        return r

    def cancel_all(self) -> None:
        """Cancel every job of this (private) cluster."""
        self.login(["scancel", "--user=root"], timeout=30)

    def sbatch(
        self,
        script: Path,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        sbatch_args: Sequence[str] = (),
    ) -> str:
        """Submit ``script`` from the login node; returns the job id.

        Output goes to :meth:`job_output_path` (``<workdir>/out/job-<id>.out``).
        """
        out = self._wd / "out" / "job-%j.out"
        cmd = ["sbatch", "--parsable", f"--output={out}", *sbatch_args, str(script), *args]
        r = self.login(cmd, env=env, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"sbatch failed ({r.returncode}): {r.output}")
        return str(r.stdout).strip().split(";")[0]

    def job_output_path(self, jobid: str) -> Path:
        """Where :meth:`sbatch` sends the job's output."""
        return self._wd / "out" / f"job-{jobid}.out"

    def wait_job(self, jobid: str, timeout: float = 120.0) -> tuple[str, int]:
        """Wait until the job has ended; returns ``(JobState, exit code)``.

        On timeout the job is cancelled and ``("TIMEOUT_HARNESS", -1)`` returned.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.login(["scontrol", "-o", "show", "job", jobid], timeout=30)
            fields = dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)
            state = fields.get("JobState", "")
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                code = fields.get("ExitCode", "0:0").split(":")[0]
                return state, int(code) if code.isdigit() else -1
            time.sleep(0.2)
        self.login(["scancel", jobid], timeout=30)
        return "TIMEOUT_HARNESS", -1

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
        """Start ``argv`` on node ``i`` without Slurm (its netns, hostname ``node{i}``).

        ``env`` is added to this process's environment (minus SLURM_*/launcher variables)
        with ``TMPDIR`` set to :meth:`node_tmpdir`. The process leads its own session; the
        caller owns the returned Popen (all of it is also killed by :meth:`down`).
        ``delay`` seconds: returns at once, but ``argv`` starts only after a ``sleep`` in
        the node's namespace (same process, same session: killing it cancels the start).
        """
        full_env = _clean_env({"TMPDIR": str(self.node_tmpdir(i)), **(env or {})})
        p = subprocess.Popen(
            self._in_ns(self.node_ns(i), f"node{i}", argv, delay),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            text=True,
        )
        self._children.append(p)
        return p

    def run_on_nodes(
        self,
        argv_per_node: Sequence[Sequence[str]],
        env_per_node: Optional[Sequence[Optional[Mapping[str, str]]]] = None,
        timeout: float = 120.0,
        nodes: Optional[Sequence[int]] = None,
        delays: Optional[Sequence[float]] = None,
    ) -> list[Result]:
        """Run ``argv_per_node[k]`` on node ``nodes[k]`` (default ``k``) in parallel.

        Waits for all (killing what still runs after ``timeout``) and returns one
        :class:`Result` per command, in order (``elapsed``: until the last one ended).
        Output is also kept in ``<workdir>/out/run<n>-node<i>.{out,err}``.
        ``delays[k]`` starts command ``k`` that many seconds after the others (see
        :meth:`node_exec`); ``timeout`` counts from the common start, delays included.
        """
        idx = list(nodes) if nodes is not None else list(range(len(argv_per_node)))
        envs = list(env_per_node) if env_per_node is not None else [None] * len(idx)
        waits = list(delays) if delays is not None else [0.0] * len(idx)
        if not len(idx) == len(argv_per_node) == len(envs) == len(waits):
            raise ValueError("argv_per_node, env_per_node, nodes and delays differ in length")
        run = self._next_id()
        procs = []
        files = []
        t0 = time.monotonic()
        for i, argv, env, delay in zip(idx, argv_per_node, envs, waits):
            base = self._wd / "out" / f"run{run}-node{i}"
            out, err = open(f"{base}.out", "w+"), open(f"{base}.err", "w+")  # noqa: SIM115
            files.append((out, err))
            p = self.node_exec(i, argv, env, out, err, delay=delay)
            procs.append((f"node{i}", p, list(argv)))
        timed_out = self._wait(procs, timeout)
        elapsed = time.monotonic() - t0
        results = []
        for (name, p, argv), (out, err), to in zip(procs, files, timed_out):
            out.seek(0)
            err.seek(0)
            results.append(
                Result(
                    argv,
                    p.returncode,
                    out.read(),
                    err.read(),
                    name=name,
                    elapsed=elapsed,
                    timed_out=to,
                )
            )
            out.close()
            err.close()
        return results

    # ------------------------------------------------------------------ faults
    def _node_procs(self, i: int) -> list[int]:
        """Processes in node ``i``'s namespace except the harness's daemons (its slurmd and
        slurmd's own forks): job steps, slurmstepd, node_exec commands."""
        daemons = set(self.state.get("pids", {}).values())
        r = _ip("netns", "pids", self.node_ns(i), check=False)
        found = []
        for pid in (int(p) for p in r.stdout.split() if p.isdigit()):
            if pid in daemons or pid == os.getpid():
                continue
            parent = _ppid(pid)
            if parent in daemons and _cmdline(pid) == _cmdline(parent):
                continue  # slurmd forked, not yet exec'd (a step being launched)
            found.append(pid)
        return found

    def _signal_node(self, i: int, sig: int, frozen: Optional[list[int]] = None) -> list[int]:
        done: list[int] = []
        for _ in range(5):  # a process forked while we signal is caught in the next round
            new = [p for p in self._node_procs(i) if p not in done]
            if not new:
                break
            if frozen is not None:  # recorded before they are stopped (see _save)
                frozen += [p for p in new if p not in frozen]
                self._save()
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            done += new
        return sorted(done)

    def signal_node(self, i: int, sig: int) -> list[int]:
        """Send ``sig`` to every process in node ``i``'s namespace except the harness's
        daemons, so its slurmd keeps serving later steps. Returns the pids signalled
        (``signal_node(i, SIGKILL)``: the node's job processes die, the node stays up)."""
        return self._signal_node(i, sig)

    def freeze_node(self, i: int, timeout: float = 5.0) -> list[int]:
        """SIGSTOP every process in node ``i``'s namespace except the harness's daemons, and
        wait until they are stopped: a hung node. Its sockets stay open and its kernel still
        completes TCP handshakes and ACKs data, but no process reads, writes or answers.

        Returns the pids. They are recorded in the state file, so :meth:`thaw_node` and
        teardown (also ``down`` from another process) continue them.
        """
        frozen: list[int] = self.state.setdefault("frozen", {}).setdefault(str(i), [])
        pids = self._signal_node(i, signal.SIGSTOP, frozen)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(_proc_state(p) in ("T", "", "Z") for p in pids):
                break
            time.sleep(0.01)
        return pids

    def thaw_node(self, i: int) -> list[int]:
        """SIGCONT the processes :meth:`freeze_node` stopped on node ``i`` (those still in
        its namespace, so a reused PID is never hit). Returns their pids."""
        frozen = self.state.get("frozen", {}).get(str(i), [])
        here = set(self._node_procs(i))
        pids = sorted(p for p in set(frozen) if p in here)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.state.get("frozen", {}).pop(str(i), None)
        self._save()
        return pids

    def link_down(self, i: int) -> None:
        """Set node ``i``'s ``ib`` interface down inside its namespace: a pulled cable.

        Peers get no TCP reset; their packets to the node are dropped (connects time out,
        or fail with *No route to host* once their ARP entry expires). The node's IPv6
        address is kept (``keep_addr_on_down``), so :meth:`link_up` restores everything.
        """
        self.node_sysctl(i, "net.ipv6.conf.ib.keep_addr_on_down", "1")
        down = self.state.setdefault("links_down", [])
        if i not in down:
            down.append(i)
            self._save()
        _ip("-n", self.node_ns(i), "link", "set", "ib", "down")

    def link_up(self, i: int) -> None:
        """Undo :meth:`link_down` (the addresses and routes come back at once)."""
        _ip("-n", self.node_ns(i), "link", "set", "ib", "up")
        down = self.state.get("links_down", [])
        if i in down:
            down.remove(i)
            self._save()

    def node_sysctl(self, i: int, key: str, value: Optional[object] = None) -> str:
        """Read, or set and read back, a sysctl of node ``i``'s network namespace.

        Only ``net.*`` keys: inside a network namespace other than the machine's own, the
        kernel shows only the per-namespace ones (e.g. ``net.core.somaxconn``,
        ``net.ipv4.tcp_syn_retries``), so a write cannot change the machine's settings.
        Returns the value as ``sysctl -n`` prints it (several numbers: tab-separated).
        """
        if not re.match(r"^net[./][A-Za-z0-9_./-]+$", key):
            raise ValueError(f"only net.* sysctls are per network namespace: {key!r}")
        ns = self.node_ns(i)
        sysctl = find_binary("sysctl") or "sysctl"
        if value is not None:
            _run(["ip", "netns", "exec", ns, sysctl, "-q", "-w", f"{key}={value}"])
        return _run(["ip", "netns", "exec", ns, sysctl, "-n", key]).stdout.strip()


def split_labeled(text: str) -> dict[int, str]:
    """Split ``srun --label`` output into ``{task id: text}``."""
    parts: dict[int, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+): ?(.*)$", line)
        if m:
            parts.setdefault(int(m.group(1)), []).append(m.group(2))
    return {k: "\n".join(v) for k, v in sorted(parts.items())}


def free_prefix(base: str = "trj") -> str:
    """``base``, or ``base2``, ``base3``... if another live process runs a ``base`` cluster.

    A cluster whose owner process died counts as free: ``up()`` removes it. (Two processes
    picking at the same moment may still collide; ``up()`` then raises ClusterError.)
    """
    for n in range(1, 100):
        p = base if n == 1 else f"{base}{n}"
        metric = f"metric {route_metric(p)} "
        routes = _ip("-4", "route", "show", "type", "unreachable", check=False).stdout
        if not Path(f"/run/netns/{p}ctl").exists() and metric not in routes.replace("\n", " "):
            return p
        owners = [
            json.loads((w / STATE_FILE).read_text()).get("owner_pid") for w in Cluster.find(p)
        ]
        if owners and all(o is not None and not pid_alive(o) for o in owners):
            return p
    raise ClusterError(f"no free cluster prefix for {base!r}")


def discover(prefix: str) -> Cluster:
    """A handle for tearing down leftovers of ``prefix`` when no state file exists."""
    c = Cluster(prefix=prefix, workdir=Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX)))
    ns_re = re.compile(rf"^{re.escape(prefix)}(node\d+|ctl)$")
    nss = [ln.split()[0] for ln in _ip("netns", "list").stdout.splitlines() if ln.strip()]
    nss = [n for n in nss if ns_re.match(n)]
    link_re = re.compile(rf"^{re.escape(prefix)}(mgmtA|mgmtB|ib|\d+[mi]|ci)$")
    links = [n for n in os.listdir("/sys/class/net") if link_re.match(n)]
    metric = route_metric(prefix)
    c.state = {
        "prefix": prefix,
        "workdir": str(c.workdir),
        "own_workdir": True,
        "metric": metric,
        "netns": nss,
        "links": links,
        "pids": {},
        "etc_netns": [f"/etc/netns/{n}" for n in nss],
        "routes": [["-6" if ":" in net else "-4", net, metric] for net in SUBNETS],
    }
    return c


# ---------------------------------------------------------------------- command line
def _pick(args: argparse.Namespace) -> list[Cluster]:
    if args.workdir:
        return [Cluster.attach(Path(args.workdir))]
    found = Cluster.find(args.prefix)
    return [Cluster.attach(w) for w in found]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m tests.cluster.harness up|down|status|run``."""
    ap = argparse.ArgumentParser(
        prog="python -m tests.cluster.harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring a cluster up and leave it running")
    p_up.add_argument("-n", "--nodes", type=int, default=4)
    p_up.add_argument("--auth", choices=("none", "munge"), default="none")
    p_up.add_argument("--python", default=sys.executable, help="interpreter for the nodes")
    p_up.add_argument(
        "--ib-base", type=int, default=IB_BASE, help="host number of node0 (node i: base+i)"
    )
    p_up.add_argument("--task-plugin", choices=TASK_PLUGINS, default="none")
    for p in (
        p_up,
        *(
            sub.add_parser(n, help=h)
            for n, h in (
                ("down", "tear down (by state file, or by name if none is found)"),
                ("status", "show clusters and their nodes"),
                ("run", "run a command on the login node (default) or on --node I"),
            )
        ),
    ):
        p.add_argument("--prefix", default=None if p is not p_up else "trj")
        p.add_argument("--workdir", help="cluster workdir (default: search /tmp)")
    sub.choices["run"].add_argument("--node", type=int, help="run on this node, without Slurm")
    sub.choices["run"].add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)

    if args.cmd == "up":
        why = missing_requirements()
        if why:
            print("cannot build a cluster: " + "; ".join(why), file=sys.stderr)
            return 2
        wd = Path(args.workdir) if args.workdir else None
        c = Cluster(
            args.nodes,
            args.prefix,
            wd,
            Path(args.python),
            args.auth,
            ib_base=args.ib_base,
            task_plugin=args.task_plugin,
        )
        c.up(guard=False)
        print(
            f"cluster {c.prefix} up in {c.state['up_seconds']} s: {c.nodes} nodes, "
            f"workdir {c.workdir}"
        )
        print(
            f"  python -m tests.cluster.harness run --prefix {c.prefix} -- srun -N{c.nodes} "
            "hostname"
        )
        print(f"  python -m tests.cluster.harness down --prefix {c.prefix}")
        return 0
    clusters = _pick(args)
    if args.cmd == "down":
        if not clusters and args.prefix:
            clusters = [discover(args.prefix)]
        for c in clusters:
            c.down()
            print(f"cluster {c.prefix} down ({c.workdir})")
        return 0
    if not clusters:
        print("no cluster found", file=sys.stderr)
        return 1
    if args.cmd == "status":
        for c in clusters:
            st = c.state
            print(
                f"{c.prefix}: {c.nodes} nodes, workdir {c.workdir}, owner pid "
                f"{st.get('owner_pid')}, processes {len(c.pids())}"
            )
            print(c.login(["sinfo", "-N"], timeout=20).output.rstrip())
        return 0
    if len(clusters) > 1:
        print("several clusters match; give --prefix or --workdir", file=sys.stderr)
        return 1
    c = clusters[0]
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.node is None:
        r = c.login(cmd, timeout=3600)
    else:
        [r] = c.run_on_nodes([cmd], timeout=3600, nodes=[args.node])
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
