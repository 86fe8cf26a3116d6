"""Slurm on the namespaces: slurm.conf and friends, the optional munged, the daemons.

slurmctld runs in the controller's namespace, one slurmd in each node's; each daemon gets a
UTS hostname of its own (see :func:`~tests.cluster.namespaces.in_ns`). Their logs, spool
and state directories are in the workdir.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from tests.cluster.namespaces import in_ns
from tests.cluster.state import Ledger
from tests.cluster.system import ClusterError, clean_env, find_binary, pid_alive, run, tail, write
from tests.cluster.topology import CTL_IP, Layout

AUTHS = ("none", "munge")
#: A job credential's lifetime, which is also how long Slurm holds a requeued job back before
#: it may start again (120 s by default): the requeue scenarios need less.
CRED_EXPIRE = "cred_expire=10"
TASK_PLUGINS = ("none", "affinity")

#: runs a command on the login node with a timeout (``Cluster.login``)
Login = Callable[[Sequence[str], float], subprocess.CompletedProcess[Any]]


def slurm_conf(wd: Path) -> Path:
    """Path of the generated slurm.conf in workdir ``wd``."""
    return wd / "etc" / "slurm.conf"


def node_tmpdir(wd: Path, i: int) -> Path:
    """TMPDIR of node ``i`` (set for node_exec and, via TaskProlog, for Slurm tasks)."""
    return wd / "tmp" / f"node{i}"


class Slurm:
    """Configuration and daemons of one cluster (``auth`` in :data:`AUTHS`, ``task_plugin``
    in :data:`TASK_PLUGINS`); every daemon's pid is noted in the ledger's ``pids``."""

    def __init__(self, layout: Layout, ledger: Ledger, auth: str, task_plugin: str) -> None:
        self.layout = layout
        self.ledger = ledger
        self.auth = auth
        self.task_plugin = task_plugin

    def write_configs(self) -> None:
        """The workdir's directories, slurm.conf, cgroup.conf, the TaskProlog; munged first
        if ``auth`` is ``"munge"``."""
        wd = self.ledger.wd
        for sub in ("etc", "log", "run", "out", "state/ctld", "tmp/ctl"):
            (wd / sub).mkdir(parents=True, exist_ok=True)
        for i in range(self.layout.nodes):
            node_tmpdir(wd, i).mkdir(parents=True, exist_ok=True)
            (wd / "state" / f"slurmd-node{i}").mkdir(parents=True, exist_ok=True)
        if self.auth == "munge":
            auth = self._start_munge()
        else:
            auth = f"AuthType=auth/none\nCredType=cred/none\nAuthInfo={CRED_EXPIRE}\n"
        prolog = wd / "etc" / "task_prolog.sh"
        # Slurm tasks inherit the caller's env; give each node its own TMPDIR instead.
        write(prolog, f'#!/bin/sh\necho "export TMPDIR={wd}/tmp/$(hostname)"\n', 0o755)
        if self.task_plugin == "affinity":
            # Bind to cores by default: each namespace node has one socket, and Slurm's
            # automatic binding gives one task per node the whole socket (every CPU), which
            # would hide a step that was given fewer CPUs than SLURM_CPUS_PER_TASK says.
            task = "TaskPlugin=task/affinity\nTaskPluginParam=Cores\n"
        else:
            task = "TaskPlugin=task/none\n"
        last = self.layout.nodes - 1
        addrs = ",".join(f"node{i}i" for i in range(self.layout.nodes))
        # %n (the node name) keeps the slurmd files apart: every slurmd reads this one file.
        conf = f"""\
ClusterName={self.layout.prefix}
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
        write(slurm_conf(wd), conf)
        # slurmd always loads a cgroup plugin; `ip netns exec` hides /sys/fs/cgroup, so
        # autodetection fails. Naming the plugin skips it (nothing uses cgroups here).
        write(wd / "etc" / "cgroup.conf", "CgroupPlugin=cgroup/v1\n")

    def _start_munge(self) -> str:
        """Start a private munged (user munge) on a fresh key; the slurm.conf auth lines."""
        wd = self.ledger.wd
        m = wd / "munge"
        for sub in ("etc", "run", "log", "lib"):
            (m / sub).mkdir(parents=True, exist_ok=True)
        key = m / "etc" / "munge.key"
        run(["mungekey", "-c", "-k", str(key)])
        # munged checks that its key and directories belong to user munge and are private
        run(["chown", "-R", "munge:munge", str(m)])
        for sub in ("etc", "log", "lib"):
            (m / sub).chmod(0o700)
        m.chmod(0o755)
        (m / "run").chmod(0o755)
        key.chmod(0o400)
        wd.chmod(0o755)  # munged (user munge) must traverse the workdir
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
        self.spawn("munged", argv)
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise ClusterError("munged did not start:\n" + self.log_tails())
            time.sleep(0.05)
        return f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock},{CRED_EXPIRE}\n"

    def spawn(self, name: str, argv: list[str]) -> None:
        """Start daemon ``name`` in its own session, output to ``log/<name>.stdout``."""
        wd = self.ledger.wd
        log = open(wd / "log" / f"{name}.stdout", "ab")  # noqa: SIM115
        env = clean_env({"SLURM_CONF": str(slurm_conf(wd)), "TMPDIR": str(wd / "tmp")})
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        self.ledger.track(p)
        self.ledger.data["pids"][name] = p.pid
        self.ledger.save()

    def start_daemons(self) -> None:
        """slurmctld in the controller's namespace, one slurmd in each node's."""
        conf = str(slurm_conf(self.ledger.wd))
        ctld = find_binary("slurmctld") or "slurmctld"
        slurmd = find_binary("slurmd") or "slurmd"
        lay = self.layout
        self.spawn("slurmctld", in_ns(lay.ctl_ns, "ctl", [ctld, "-D", "-i", "-f", conf]))
        for i in range(lay.nodes):
            argv = in_ns(lay.node_ns(i), f"node{i}", [slurmd, "-D", "-f", conf])
            self.spawn(f"slurmd-node{i}", argv)

    def wait_idle(self, timeout: float, login: Login) -> None:
        """Until ``sinfo`` (through ``login``) shows every node idle; ClusterError, with the
        daemons' log tails, if a daemon exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            for name, pid in self.ledger.data["pids"].items():
                if not pid_alive(pid):
                    raise ClusterError(f"{name} exited during start-up:\n" + self.log_tails())
            r = login(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], 10)
            out = r.stdout
            if r.returncode == 0 and len(set(out.split())) == self.layout.nodes:
                return
            time.sleep(0.2)
        raise ClusterError(
            f"nodes not idle after {timeout:.0f}s (idle: {out.split()}):\n" + self.log_tails()
        )

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` lines of every log in the workdir."""
        parts = []
        for f in sorted((self.ledger.wd / "log").glob("*")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {f.name}\n{tail(f.read_text(errors='replace'), lines)}")
        return "\n".join(parts)
