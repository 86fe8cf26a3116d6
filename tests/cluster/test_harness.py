"""End-to-end checks of the namespace Slurm cluster and the bug it reproduces."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from tests.cluster.harness import (
    Cluster,
    free_prefix,
    ib_ip,
    mgmt_ip,
    pid_alive,
    route_metric,
    split_labeled,
)
from tests.cluster.scenarios import (
    assert_failed,
    assert_training_ok,
    describe,
    on_each_node,
    torchrun_argv,
)
from tests.cluster.state import WORKDIR_PREFIX
from tests.cluster.system import cmdline, proc_state

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
FAIL_RDZV = "join_timeout=5,read_timeout=5"  # `timeout=` would be silently ignored by torch


def test_srun_runs_one_task_per_node(cluster: Cluster) -> None:
    r = cluster.srun(["bash", "-c", 'echo "$(hostname) $SLURM_NODEID $SLURM_JOB_NODELIST $TMPDIR"'])
    assert r.returncode == 0, describe(r)
    lines = sorted(split_labeled(r.stdout).values())
    expect = [f"node{i} {i} node[0-3] {cluster.node_tmpdir(i)}" for i in range(cluster.nodes)]
    assert lines == expect, describe(r)


def test_sbatch_with_srun_inside(cluster: Cluster) -> None:
    script = cluster.workdir / "hello.sbatch"  # type: ignore[operator]
    script.write_text(
        "#!/bin/bash\n#SBATCH -N4\n#SBATCH --ntasks-per-node=1\n"
        'echo "batch on $(hostname) nodes=$SLURM_JOB_NODELIST"\n'
        "srun bash -c 'echo \"step $(hostname) $SLURM_NODEID\"'\n"
    )
    jobid = cluster.sbatch(script)
    state, code = cluster.wait_job(jobid, timeout=60)
    out = cluster.job_output_path(jobid).read_text()
    assert (state, code) == ("COMPLETED", 0), out
    assert "batch on node0 nodes=node[0-3]" in out
    assert sorted(ln for ln in out.splitlines() if ln.startswith("step")) == [
        f"step node{i} {i}" for i in range(4)
    ], out


_LISTEN = """
import socket, time
s4 = socket.socket(socket.AF_INET)
s4.bind(("0.0.0.0", 7777)); s4.listen(64)
s6 = socket.socket(socket.AF_INET6)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
s6.bind(("::", 7777)); s6.listen(64)
print("ready", flush=True)
time.sleep(60)
"""
_PROBE = """
import socket, sys
for name in sys.argv[1:]:
    try:
        socket.create_connection((name, 7777), timeout=2).close()
        print(name, "ok")
    except OSError as e:
        print(name, "fail", e)
"""


def test_network_isolation(cluster: Cluster) -> None:
    # root namespace: every test subnet is unreachable, nothing can leak out of the machine
    for addr in (ib_ip(0), mgmt_ip(0), "fd00:78::10"):
        r = subprocess.run(["ip", "route", "get", addr], capture_output=True, text=True)
        assert r.returncode != 0 or "unreachable" in r.stdout, (addr, r.stdout, r.stderr)
    py = str(cluster.python)
    listener = cluster.node_exec(0, [py, "-c", _LISTEN])
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "ready"
        targets = ["node0", "node0i", "node0i6", mgmt_ip(0)]
        res = cluster.run_on_nodes([[py, "-c", _PROBE, *targets]] * 2, nodes=[1, 2], timeout=30)
    finally:
        listener.kill()
        listener.communicate()
    got = {r.name: dict(ln.split(" ", 1) for ln in r.stdout.splitlines()) for r in res}
    ok = {name: {t for t, v in d.items() if v == "ok"} for name, d in got.items()}
    assert ok == {"node1": set(targets), "node2": {"node0i", "node0i6"}}, describe(res)


def test_plain_torchrun_fails_with_ib_endpoint(cluster: Cluster) -> None:
    """The bug: nobody hosts the store for node0i:29500, every agent gives up."""
    argv = torchrun_argv(cluster.python, 4, "node0i:29500", rdzv_conf=FAIL_RDZV)
    r = cluster.srun(argv, timeout=120)
    assert not r.timed_out, describe(r)
    assert_failed(r, "RendezvousConnectionError", min_count=4)


def test_hand_fixed_torchrun_succeeds_via_srun(cluster: Cluster) -> None:
    argv = torchrun_argv(
        cluster.python,
        4,
        "node0i:29500",
        rdzv_conf="is_host=@IS_FIRST@,join_timeout=60,read_timeout=60",
        extra=["--local_addr=@HOSTNAME@i"],
    )
    r = cluster.srun(on_each_node(argv), env={"GLOO_SOCKET_IFNAME": "ib"}, timeout=180)
    assert_training_ok(cluster, r, world=4, master_addr="node0i")
    for i in range(4):  # torchrun's /tmp/torchelastic_* dirs land in the node's TMPDIR
        assert list(cluster.node_tmpdir(i).glob("torchelastic_*")), f"node{i} TMPDIR unused"


def test_hand_fixed_torchrun_succeeds_without_slurm(cluster: Cluster) -> None:
    """Same fix through run_on_nodes: the pattern launcher scenarios use."""
    argvs = [
        torchrun_argv(
            cluster.python,
            4,
            "node0i:29500",
            rdzv_conf=f"is_host={int(i == 0)},join_timeout=60,read_timeout=60",
            extra=[f"--local_addr=node{i}i"],
        )
        for i in range(4)
    ]
    envs = [{"GLOO_SOCKET_IFNAME": "ib"}] * 4
    res = cluster.run_on_nodes(argvs, envs, timeout=180)
    assert_training_ok(cluster, res, world=4, master_addr="node0i")


def _leftovers(c: Cluster, daemon_pids: list[int], before_tmp: set[str]) -> list[str]:
    """Everything of ``c`` still present on the machine after down()."""
    p = c.prefix
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {n}" for n in ns.split() if n.startswith(f"{p}node") or n == f"{p}ctl"]
    metric = f"metric {route_metric(p)} "
    for fam in ("-4", "-6"):
        routes = subprocess.run(["ip", fam, "route"], capture_output=True, text=True).stdout
        found += [f"route {ln}" for ln in routes.splitlines() if metric in ln + " "]
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith(p)]
    found += [f"pid {pid}" for pid in daemon_pids if pid_alive(pid)]
    if os.path.isdir("/etc/netns"):
        found += [f"/etc/netns/{n}" for n in os.listdir("/etc/netns") if n.startswith(p)]
    assert c.workdir is not None
    if c.workdir.exists():
        found.append(f"workdir {c.workdir}")
    # the harness only ever creates its workdir (checked above); Slurm/munge must not write /tmp
    # either. Other sessions create trjsc-cluster-* workdirs concurrently, and the workdir
    # prefix begins like the prefixes trjs*: those are not this cluster's.
    new_tmp = set(os.listdir(tempfile.gettempdir())) - before_tmp
    found += [
        f"tmp {n}"
        for n in new_tmp
        if n.startswith(("slurm", "munge", c.prefix)) and not n.startswith(WORKDIR_PREFIX)
    ]
    return found


def _down_from_another_process(c: Cluster) -> None:
    """``python -m tests.cluster.harness down --workdir <c's workdir>``, which must succeed."""
    argv = [sys.executable, "-m", "tests.cluster.harness", "down", "--workdir", str(c.workdir)]
    subprocess.run(argv, cwd=REPO, check=True, capture_output=True, timeout=60)


@pytest.mark.parametrize("how", ["down", "munge", "exception", "other-process"])
def test_teardown_leaves_nothing(how: str) -> None:
    before_tmp = set(os.listdir(tempfile.gettempdir()))
    auth = "munge" if how == "munge" else "none"
    c = Cluster(nodes=2, prefix=free_prefix("trjt"), auth=auth, keep_logs=False)
    pids: list[int] = []
    expect_boom = pytest.raises(RuntimeError, match="boom") if how == "exception" else None
    with expect_boom or contextlib.nullcontext(), c:
        pids = list(c.state["pids"].values())
        assert len(pids) == (4 if auth == "munge" else 3)
        r = c.srun(["hostname"])
        assert sorted(split_labeled(r.stdout).values()) == ["node0", "node1"], describe(r)
        leftover = c.node_exec(1, ["sleep", "300"])  # must be killed by down()
        pids.append(leftover.pid)
        if how == "exception":
            raise RuntimeError("boom")
        if how == "other-process":
            state = json.loads((c.workdir / "state.json").read_text())  # type: ignore[operator]
            assert {"routes", "netns", "links", "pids", "etc_netns"} <= set(state)
            _down_from_another_process(c)
            assert not _leftovers(c, pids, before_tmp)
    leftover.wait(5)
    assert not _leftovers(c, pids, before_tmp)
    assert {len(c.state[k]) for k in ("routes", "netns", "links")} == {0}
    c.down()  # idempotent


_HOLD = """
import sys, time
from tests.cluster.harness import Cluster
c = Cluster(nodes=2, prefix=sys.argv[1], keep_logs=False).up()
print(c.workdir, *c.state["pids"].values(), flush=True)
time.sleep(120)
"""


def _hold(sig: int, disposition: Any) -> Tuple[subprocess.Popen[str], Cluster, List[int]]:
    """A process holding a 2-node cluster, started with ``sig`` at ``disposition`` (set
    explicitly: a background session hands its children SIGINT ignored); its cluster and
    daemon pids once it is up."""
    prefix = free_prefix("trjs")
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, prefix],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(sig, disposition),
    )
    assert p.stdout is not None
    line = p.stdout.readline().split()
    assert line, p.communicate(timeout=30)
    workdir, pids = Path(line[0]), [int(x) for x in line[1:]]
    return p, Cluster(nodes=2, prefix=prefix, workdir=workdir), pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_teardown_on_signal(sig: int) -> None:
    before_tmp = set(os.listdir(tempfile.gettempdir()))
    p, c, pids = _hold(sig, signal.SIG_DFL)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert not _leftovers(c, pids, before_tmp), err


def test_ignored_sigint_leaves_the_cluster_up() -> None:
    """A session started with SIGINT ignored (a shell's background job) keeps its clusters
    through a SIGINT: they used to be torn down under the running tests, which went on."""
    before_tmp = set(os.listdir(tempfile.gettempdir()))
    p, c, pids = _hold(signal.SIGINT, signal.SIG_IGN)
    p.send_signal(signal.SIGINT)
    time.sleep(2)
    assert p.poll() is None and all(pid_alive(pid) for pid in pids)
    p.send_signal(signal.SIGTERM)  # still guarded: torn down
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0
    assert not _leftovers(c, pids, before_tmp), err


@pytest.mark.parametrize("n", [5, 16])
def test_sizes(make_cluster, n: int) -> None:  # type: ignore[no-untyped-def]
    """make_cluster(nodes=n) gives n nodes: each runs a step of srun -N<n> and resolves its
    IPv6 name; the mgmt cells split n // 2 + the rest (5: an odd size, as with spares)."""
    t0 = time.monotonic()
    c = make_cluster(nodes=n, prefix="trjx")
    up = time.monotonic() - t0
    assert c.nodes == n and f"NodeName=node[0-{n - 1}] " in c.slurm_conf.read_text()
    show = 'echo "$(hostname) $SLURM_NODEID $(getent hosts $(hostname)i6)"'
    r = c.srun(["bash", "-c", show], nodes=n)
    assert r.returncode == 0 and r.args[:2] == ["srun", f"-N{n}"], describe(r)
    lines = sorted(
        (" ".join(v.split()) for v in split_labeled(r.stdout).values()),
        key=lambda s: int(s.split()[1]),
    )
    assert lines == [f"node{i} {i} fd00:78::{10 + i} node{i}i6" for i in range(n)], describe(r)
    cells = [Path(f"/sys/class/net/{c.prefix}{i}m/master").resolve().name for i in range(n)]
    assert cells == [f"{c.prefix}mgmtA"] * (n // 2) + [f"{c.prefix}mgmtB"] * (n - n // 2), cells
    print(f"{n} nodes up in {up:.1f}s, srun -N{n} {r.elapsed:.1f}s")
    c.down()


def test_thirty_two_nodes() -> None:
    """32 namespaces + 32 slurmd on 2 cores: up, one step on every node, nothing left."""
    before_tmp = set(os.listdir(tempfile.gettempdir()))
    t0 = time.monotonic()
    with Cluster(nodes=32, prefix=free_prefix("trjy"), keep_logs=False) as c:
        up = time.monotonic() - t0
        pids = c.pids()
        r = c.srun(["hostname"])
        assert r.returncode == 0, describe(r)
        got = split_labeled(r.stdout)
        assert [got[k] for k in sorted(got)] == c.hostnames, describe(r)
        t1 = time.monotonic()
    down = time.monotonic() - t1
    assert not _leftovers(c, pids, before_tmp)
    print(f"32 nodes up in {up:.1f}s, srun -N32 {r.elapsed:.2f}s, down {down:.1f}s")


def test_ib_base_crosses_a_digit_boundary() -> None:
    """ib_base=98: .98 .99 .100 .101, so string order of the addresses is not node order."""
    with Cluster(nodes=4, prefix=free_prefix("trjb"), ib_base=98, keep_logs=False) as c:
        ib4 = [c.ib_ip(i) for i in range(4)]
        assert ib4 == ["10.78.0.98", "10.78.0.99", "10.78.0.100", "10.78.0.101"]
        assert sorted(ib4) != ib4
        assert ib_ip(0) == "10.78.0.10" and c.ib_ip6(2) == "fd00:78::100"
        script = "ip -br addr; getent hosts $(hostname) $(hostname)i $(hostname)i6 ctl ctl6"
        res = c.run_on_nodes([["sh", "-c", script]] * 4, timeout=30)
        for i, r in enumerate(res):
            assert r.returncode == 0, describe(res)
            brief = [ln.split() for ln in r.stdout.splitlines() if "/" in ln]
            # "mgmt@if12 UP 10.77.0.98/16 fe80::…/64": interface -> addresses, no link-local
            addrs = {
                w[0].split("@")[0]: [a for a in w[2:] if not a.startswith("fe80:")] for w in brief
            }
            assert addrs["mgmt"] == [f"{c.mgmt_ip(i)}/16"], r.stdout
            assert addrs["ib"] == [f"{c.ib_ip(i)}/16", f"{c.ib_ip6(i)}/64"], r.stdout
            names = [ln.split() for ln in r.stdout.splitlines() if "/" not in ln]
            assert names == [
                [c.mgmt_ip(i), f"node{i}"],
                [c.ib_ip(i), f"node{i}i"],
                [c.ib_ip6(i), f"node{i}i6"],
                ["10.78.0.250", "ctl"],
                ["fd00:78::250", "ctl6"],
            ], r.stdout
        r = c.srun(["bash", "-c", "getent hosts $(hostname)i"])  # slurmctld reaches every node
        assert r.returncode == 0, describe(r)
        got = sorted(split_labeled(r.stdout).items())
        assert [v.split()[0] for _, v in got] == ib4, describe(r)
    with pytest.raises(ValueError, match="ib_base"):
        Cluster(nodes=4, ib_base=247)


_TERM_MARK = """
import signal, sys, time
def on_term(*_):
    open(sys.argv[1], "w").write("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(300)
"""


def _wait_for_cmdline(c: Cluster, i: int, text: str, timeout: float = 30) -> bool:
    """Wait until a process on node ``i`` has ``text`` in its command line."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["ip", "netns", "pids", c.node_ns(i)], capture_output=True, text=True)
        if any(text in cmdline(int(q)) for q in r.stdout.split()):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", ["thaw", "down", "other-process"])
def test_freeze_node(how: str, tmp_path: Path) -> None:
    """freeze_node stops a node's job processes (not its slurmd); thaw_node or teardown
    continues them, so they act on SIGTERM (the marker file) and nothing is left."""
    before_tmp = set(os.listdir(tempfile.gettempdir()))
    c = Cluster(nodes=2, prefix=free_prefix("trjf"), keep_logs=False)
    mark = tmp_path / "got-term"
    with c:
        pids = list(c.state["pids"].values())
        slurmd1 = c.state["pids"]["slurmd-node1"]
        job = c.workdir / "hold.sbatch"  # type: ignore[operator]
        job.write_text("#!/bin/sh\nsleep 300\n")
        jobid = c.sbatch(job, sbatch_args=["-w", "node1"])
        p = c.node_exec(1, [str(c.python), "-c", _TERM_MARK, str(mark)])
        bystander = c.node_exec(0, ["sleep", "300"])
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        assert _wait_for_cmdline(c, 1, "sleep 300"), "the batch job did not start on node1"
        frozen = c.freeze_node(1)
        pids += [p.pid, bystander.pid, *frozen]
        assert p.pid in frozen and slurmd1 not in frozen and bystander.pid not in frozen
        names = sorted(cmdline(q).split()[0] for q in frozen)
        assert names == ["/bin/sh", str(c.python), "sleep", "slurmstepd:"], names
        assert {proc_state(q) for q in frozen} == {"T"}, {q: proc_state(q) for q in frozen}
        assert proc_state(slurmd1) in ("S", "R") and proc_state(bystander.pid) in ("S", "R")
        r = c.srun(["hostname"])  # slurmd on the frozen node still serves new steps
        assert sorted(split_labeled(r.stdout).values()) == ["node0", "node1"], describe(r)
        assert c.login(["squeue", "-h", "-j", jobid, "-o", "%T"]).stdout.strip() == "RUNNING"
        if how == "thaw":
            assert c.thaw_node(1) == sorted(frozen)
            assert "T" not in {proc_state(q) for q in frozen}
        elif how == "other-process":
            _down_from_another_process(c)
    p.communicate(timeout=5)
    assert mark.read_text() == "term"  # continued before SIGTERM, not killed after the grace
    assert not _leftovers(c, pids, before_tmp)


_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 7777), timeout=float(sys.argv[2])).close()
    print("ok")
except OSError as e:
    print("fail", e)
"""


_CTL_CONNECT = """
import socket
try:
    socket.create_connection(("ctl", 6817), timeout=2).close()  # slurmctld
    print("ok")
except OSError as e:
    print("fail", e)
"""


def test_link_down_and_up() -> None:
    """link_down is a pulled cable: connects over IB time out (no reset); link_up restores
    IPv4 and IPv6."""
    with Cluster(nodes=2, prefix=free_prefix("trjn"), keep_logs=False) as c:
        py = str(c.python)
        listener = c.node_exec(0, [py, "-c", _LISTEN])
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"

        def probe(timeout: float) -> dict[str, str]:
            ps = {
                n: c.node_exec(1, [py, "-c", _CONNECT, n, str(timeout)])
                for n in ("node0i", "node0i6")
            }
            return {n: q.communicate(timeout=30)[0].strip() for n, q in ps.items()}

        assert probe(2) == {"node0i": "ok", "node0i6": "ok"}
        c.link_down(0)
        assert c.state["links_down"] == [0]
        link = c.run_on_nodes([["ip", "-br", "link", "show", "ib"]], nodes=[0])[0].stdout
        assert " DOWN " in link, link
        got = probe(1)
        assert got == {"node0i": "fail timed out", "node0i6": "fail timed out"}, got
        c.link_up(0)
        assert c.state["links_down"] == []
        assert probe(2) == {"node0i": "ok", "node0i6": "ok"}
        listener.kill()
        listener.communicate()


_ECHO_CLIENT = """
import os, socket, sys, time
c = socket.create_connection((sys.argv[1], 7777), timeout=2)
print("connected", flush=True)
for k in range(2):  # one echo per file <argv[2]>.<k>, within the timeout the file says
    while not os.path.exists(f"{sys.argv[2]}.{k}"):
        time.sleep(0.05)
    c.settimeout(float(open(f"{sys.argv[2]}.{k}").read()))
    try:
        c.sendall(b"x")
        print("echo" if c.recv(1) == b"x" else "closed", flush=True)
    except OSError as e:
        print("fail", e, flush=True)
"""
_ECHO = """
import socket, threading
s = socket.create_server(("::", 7777), family=socket.AF_INET6, dualstack_ipv6=True)
print("ready", flush=True)
def echo(c):
    while data := c.recv(100):
        c.sendall(data)
while True:
    threading.Thread(target=echo, args=(s.accept()[0],), daemon=True).start()
"""


def test_partition_and_heal() -> None:
    """partition: connects across it time out (no reset, no error at the sender), an
    established connection across it hangs, within a group and to ctl everything gets
    through, IPv4 and IPv6; heal restores it all, the hung connection included."""
    with Cluster(nodes=3, prefix=free_prefix("trjn"), keep_logs=False) as c:
        py = str(c.python)
        servers = [c.node_exec(i, [py, "-c", _ECHO]) for i in range(3)]
        for srv in servers:
            assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"

        def probe(node: int, timeout: float) -> dict[str, str]:
            names = [f"node{j}i{six}" for j in range(3) if j != node for six in ("", "6")]
            ps = {n: c.node_exec(node, [py, "-c", _CONNECT, n, str(timeout)]) for n in names}
            got = {n: q.communicate(timeout=30)[0].strip() for n, q in ps.items()}
            [ctl] = c.run_on_nodes([[py, "-c", _CTL_CONNECT]], nodes=[node], timeout=30)
            got["ctl"] = ctl.stdout.strip()
            return got

        go = c.workdir / "echo-go"  # type: ignore[operator]
        held = c.node_exec(1, [py, "-c", _ECHO_CLIENT, "node0i6", str(go)])
        assert held.stdout is not None and held.stdout.readline().strip() == "connected"
        reached = {n: "ok" for n in ("node0i", "node0i6", "node2i", "node2i6", "ctl")}
        assert probe(1, 2) == reached
        c.partition([[0], [1, 2]])
        cut = [(i, a) for i in (1, 2) for a in ("10.78.0.10", "fd00:78::10")]
        cut += [(0, a) for a in ("10.78.0.11", "10.78.0.12", "fd00:78::11", "fd00:78::12")]
        assert sorted(map(tuple, c.state["partition"])) == sorted(cut)
        lost = {"node0i": "fail timed out", "node0i6": "fail timed out"}
        assert probe(1, 1) == {**reached, **lost}
        assert probe(0, 1) == {
            "node1i": "fail timed out",
            "node1i6": "fail timed out",
            "node2i": "fail timed out",
            "node2i6": "fail timed out",
            "ctl": "ok",
        }
        Path(f"{go}.0").write_text("2")
        assert held.stdout.readline().strip() == "fail timed out"
        c.heal()
        assert c.state["partition"] == []
        assert probe(1, 2) == reached
        assert probe(0, 2)["node1i6"] == "ok"
        Path(f"{go}.1").write_text("15")  # the hung connection goes on when retransmitted
        assert held.stdout.readline().strip() == "echo"
        held.wait(timeout=10)
        for srv in servers:
            srv.kill()
            srv.communicate()


def test_node_sysctl(cluster: Cluster) -> None:
    """A per-namespace sysctl changes on that node only (not on the others, not the machine)."""
    key = "net.core.somaxconn"
    machine = Path("/proc/sys/net/core/somaxconn").read_text().strip()
    before = [cluster.node_sysctl(i, key) for i in (0, 1)]
    try:
        assert cluster.node_sysctl(1, key, 77) == "77"
        assert cluster.node_sysctl(1, key) == "77"
        [r] = cluster.run_on_nodes([["cat", "/proc/sys/net/core/somaxconn"]], nodes=[1])
        assert r.stdout.strip() == "77", describe(r)
        assert cluster.node_sysctl(0, key) == before[0]
        assert Path("/proc/sys/net/core/somaxconn").read_text().strip() == machine
    finally:
        cluster.node_sysctl(1, key, before[1])
    with pytest.raises(ValueError, match="net"):
        cluster.node_sysctl(1, "kernel.pid_max", 1)


def test_delayed_start(cluster: Cluster) -> None:
    """delay= starts one node's command later without blocking the caller."""
    wall, t0 = time.time(), time.monotonic()
    p = cluster.node_exec(0, ["date", "+%s.%N"], delay=1.5)
    assert time.monotonic() - t0 < 1.0, "node_exec must not wait for the delay"
    res = cluster.run_on_nodes([["date", "+%s.%N"]] * 2, delays=[1.5, 0], timeout=30)
    starts = [float(r.stdout) for r in res]
    assert starts[0] - starts[1] >= 1.4, describe(res)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0 and float(out) - wall >= 1.4, out
