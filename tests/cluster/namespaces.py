"""The cluster's network and its teardown: routes, namespaces, veths, bridges, processes.

Safety rules kept here: before anything else the root namespace gets ``unreachable`` routes
for every test subnet (removed only at teardown); namespaces get no default route and no
DNS; root-side bridges and veths have IPv6 disabled. Teardown ends only processes the
cluster started (daemons by PID, checked against their command line, and whatever runs in
its own namespaces), never picking processes by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from tests.cluster.state import Ledger, find
from tests.cluster.system import ClusterError, cmdline, ip, is_stepd, pid_alive, proc_state, write
from tests.cluster.topology import CTL_IP, CTL_IP6, SUBNETS, Layout, route_family

ETC_NETNS = Path("/etc/netns")


def in_ns(ns: str, hostname: str, argv: Sequence[str], delay: float = 0.0) -> list[str]:
    """argv that runs ``argv`` in netns ``ns`` with its own UTS hostname (all exec()),
    after sleeping ``delay`` seconds in the namespace."""
    if delay < 0:
        raise ValueError(f"delay must be >= 0: {delay}")
    pause = f" && sleep {float(delay):.3f}" if delay else ""
    # A UTS namespace per command: slurmd finds its NodeName by its hostname, and commands
    # must see their node's name; the machine's own hostname stays untouched.
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


def netns_pids(ns: str) -> list[int]:
    """Every process in network namespace ``ns`` (``ip netns pids``; empty if it is gone)."""
    r = ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def _disable_ipv6(ifname: str) -> None:
    """No link-local addresses on root-namespace ends of the test network."""
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")


class Network:
    """Builds and removes the namespaces, links and routes of ``layout``, noting each in
    ``ledger`` first."""

    def __init__(self, layout: Layout, ledger: Ledger) -> None:
        self.layout = layout
        self.ledger = ledger

    def claim_routes(self, remove_stale: Callable[[], bool]) -> None:
        """Safety first: unreachable routes for every test subnet in the root namespace.

        ``ip route add`` (not replace) with a per-prefix metric also claims the prefix: it
        fails if a cluster with the same prefix exists. If it fails for the first subnet,
        ``remove_stale()`` may remove such clusters whose owner died (True if it did), and
        the route is tried once more.
        """
        st = self.ledger.data
        metric = str(st["metric"])
        prefix = self.layout.prefix
        for net in SUBNETS:
            fam = route_family(net)
            r = ip(fam, "route", "add", "unreachable", net, "metric", metric, check=False)
            if r.returncode != 0 and not st["routes"] and remove_stale():
                r = ip(fam, "route", "add", "unreachable", net, "metric", metric, check=False)
            if r.returncode != 0:
                holders = [str(w) for w in find(prefix) if w != self.ledger.workdir]
                raise ClusterError(
                    f"prefix {prefix!r} is in use (route {net} metric {metric}: "
                    f"{r.stderr.strip()}); clusters: {holders or 'no state file found'}; "
                    f"remove with: python -m tests.cluster.harness down --prefix {prefix}"
                )
            self.ledger.record("routes", [fam, net, metric])

    def _add_ns(self, ns: str) -> None:
        self.ledger.record("netns", ns)
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        if not ETC_NETNS.exists():
            self.ledger.data["created_etc_netns"] = True
        self.ledger.record("etc_netns", str(ETC_NETNS / ns))
        write(ETC_NETNS / ns / "hosts", self.layout.hosts_file())
        write(
            ETC_NETNS / ns / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
        )

    def _add_if(self, ns: str, ifname: str, host_end: str, bridge: str, addrs: list[str]) -> None:
        self.ledger.record("links", host_end)
        ip("link", "add", host_end, "type", "veth", "peer", "name", ifname, "netns", ns)
        _disable_ipv6(host_end)
        ip("link", "set", host_end, "master", bridge, "up")
        for a in addrs:
            extra = ["nodad"] if ":" in a else []
            ip("-n", ns, "addr", "add", a, "dev", ifname, *extra)
        ip("-n", ns, "link", "set", ifname, "up")

    def build(self) -> None:
        """Bridges, then per node a namespace with a mgmt and an ib veth, then the ctl one."""
        lay = self.layout
        for br in lay.bridges():
            self.ledger.record("links", br)
            ip("link", "add", br, "type", "bridge")
            _disable_ipv6(br)
            ip("link", "set", br, "up")
        ib = lay.bridges()[2]
        for i in range(lay.nodes):
            ns = lay.node_ns(i)
            self._add_ns(ns)
            self._add_if(ns, "mgmt", lay.veth(i, "m"), lay.mgmt_bridge(i), [lay.mgmt_ip(i) + "/16"])
            ib_addrs = [lay.ib_ip(i) + "/16", lay.ib_ip6(i) + "/64"]
            self._add_if(ns, "ib", lay.veth(i, "i"), ib, ib_addrs)
        self._add_ns(lay.ctl_ns)
        self._add_if(lay.ctl_ns, "ib", lay.ctl_veth, ib, [CTL_IP + "/16", CTL_IP6 + "/64"])

    def pids(self) -> list[int]:
        """Live processes the harness is responsible for: its daemons + all in its namespaces."""
        st = self.ledger.data
        pids: set[int] = set()
        wd = st.get("workdir", "")
        for pid in st.get("pids", {}).values():
            if pid_alive(pid) and wd and wd in cmdline(pid):  # guards against PID reuse
                pids.add(pid)
        for ns in st.get("netns", []):
            pids |= set(netns_pids(ns))
        pids.discard(os.getpid())
        return sorted(p for p in pids if pid_alive(p))

    def _continue_stopped(self) -> None:
        """SIGCONT frozen processes (a stopped process acts on SIGTERM only once continued).

        Only processes that are still ours (in :meth:`pids`) are touched: the ones
        ``freeze_node`` recorded, and any other of ours that is stopped.
        """
        ours = set(self.pids())
        frozen = {p for pids in self.ledger.data.get("frozen", {}).values() for p in pids}
        for pid in sorted(ours):
            if pid in frozen or proc_state(pid) == "T":
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)

    def kill_all(self, grace: float = 5.0) -> None:
        """CONT the stopped ones, TERM all (``grace`` seconds), then KILL what is left."""
        self._continue_stopped()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                self.ledger.reap()
                pids = [p for p in pids if pid_alive(p)]
                if sig == signal.SIGTERM and all(is_stepd(p) for p in pids):
                    break  # slurmstepd ignores SIGTERM: no use waiting, KILL comes next
                time.sleep(0.05)
            if not self.pids():
                break
        self.ledger.reap()

    def teardown(self, keep_logs: bool) -> None:
        """End the processes, delete namespaces, veths, bridges, /etc/netns entries, the
        unreachable routes, then the workdir (kept, with its path printed, if ``keep_logs``
        or not the cluster's own). Never raises for what is already gone."""
        st = self.ledger.data
        errors: list[str] = []
        try:
            self.kill_all()
        except Exception as e:  # keep tearing down whatever happens
            errors.append(f"kill: {e}")
        for ns in reversed(st.get("netns", [])):
            ip("netns", "del", ns, check=False)
        for link in reversed(st.get("links", [])):
            if Path(f"/sys/class/net/{link}").exists():
                r = ip("link", "del", link, check=False)
                if r.returncode != 0 and "Cannot find device" not in r.stderr:
                    errors.append(r.stderr.strip())
        for d in st.get("etc_netns", []):
            shutil.rmtree(d, ignore_errors=True)
        if st.get("created_etc_netns"):
            with contextlib.suppress(OSError):
                os.rmdir(ETC_NETNS)  # only if empty
        for fam, net, metric in st.get("routes", []):
            ip(fam, "route", "del", "unreachable", net, "metric", str(metric), check=False)
        st["routes"], st["netns"], st["links"], st["etc_netns"] = [], [], [], []
        st["down"], st["up"] = True, False
        wd = Path(st["workdir"])
        if keep_logs or not st.get("own_workdir", True):
            with contextlib.suppress(OSError):
                self.ledger.save()
            if keep_logs:
                print(f"[trjsc-cluster] logs kept in {wd}", file=sys.__stderr__, flush=True)
        else:
            shutil.rmtree(wd, ignore_errors=True)
        if errors:
            print(f"[trjsc-cluster] teardown problems: {errors}", file=sys.__stderr__)


def leftover_state(layout: Layout, workdir: Path) -> dict[str, Any]:
    """A state naming what of ``layout``'s prefix exists now (namespaces, links, routes),
    for tearing down leftovers whose state file is gone."""
    nss = [ln.split()[0] for ln in ip("netns", "list").stdout.splitlines() if ln.strip()]
    nss = [n for n in nss if layout.own_netns().match(n)]
    links = [n for n in os.listdir("/sys/class/net") if layout.own_links().match(n)]
    return {
        "prefix": layout.prefix,
        "workdir": str(workdir),
        "own_workdir": True,
        "metric": layout.metric,
        "netns": nss,
        "links": links,
        "pids": {},
        "etc_netns": [str(ETC_NETNS / n) for n in nss],
        "routes": [[route_family(net), net, layout.metric] for net in SUBNETS],
    }
