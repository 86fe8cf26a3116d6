"""Faults of one node: signals, a frozen (hung) node, a pulled cable, per-node sysctls; and
of the IB network between nodes: a partition.

They act on the processes of a node's namespace except the harness's daemons, so the node's
slurmd keeps serving later steps. What teardown must undo (frozen pids) is noted in the
state file before it happens.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Sequence
from typing import Any, Optional

from tests.cluster.namespaces import netns_pids
from tests.cluster.state import Ledger
from tests.cluster.system import cmdline, find_binary, ip, ppid, proc_state, run
from tests.cluster.topology import Layout

_NET_SYSCTL = re.compile(r"^net[./][A-Za-z0-9_./-]+$")
#: Where a partition's neighbour entries send a node's frames to a peer across it: a locally
#: administered unicast address that no interface has. The IB bridge floods such a frame to
#: every port and every node drops it (not addressed to it): the packet is lost without a trace.
NOWHERE_MAC = "02:00:00:00:78:00"


class Faults:
    """Fault injection on the nodes of ``layout``."""

    def __init__(self, layout: Layout, ledger: Ledger) -> None:
        self.layout = layout
        self.ledger = ledger

    def node_procs(self, i: int) -> list[int]:
        """Processes in node ``i``'s namespace except the harness's daemons (its slurmd and
        slurmd's own forks): job steps, slurmstepd, node_exec commands."""
        daemons = set(self.ledger.data.get("pids", {}).values())
        found = []
        for pid in netns_pids(self.layout.node_ns(i)):
            if pid in daemons or pid == os.getpid():
                continue
            parent = ppid(pid)
            if parent in daemons and cmdline(pid) == cmdline(parent):
                continue  # slurmd forked, not yet exec'd (a step being launched)
            found.append(pid)
        return found

    def _signal(self, i: int, sig: int, frozen: Optional[list[int]] = None) -> list[int]:
        done: list[int] = []
        for _ in range(5):  # a process forked while we signal is caught in the next round
            new = [p for p in self.node_procs(i) if p not in done]
            if not new:
                break
            if frozen is not None:  # recorded before they are stopped
                frozen += [p for p in new if p not in frozen]
                self.ledger.save()
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            done += new
        return sorted(done)

    def signal_node(self, i: int, sig: int) -> list[int]:
        """Send ``sig`` to every process in node ``i``'s namespace except the harness's
        daemons, so its slurmd keeps serving later steps. Returns the pids signalled
        (``signal_node(i, SIGKILL)``: the node's job processes die, the node stays up)."""
        return self._signal(i, sig)

    def freeze_node(self, i: int, timeout: float = 5.0) -> list[int]:
        """SIGSTOP every process in node ``i``'s namespace except the harness's daemons, and
        wait until they are stopped: a hung node. Its sockets stay open and its kernel still
        completes TCP handshakes and ACKs data, but no process reads, writes or answers.

        Returns the pids. They are recorded in the state file, so :meth:`thaw_node` and
        teardown (also ``down`` from another process) continue them.
        """
        frozen: list[int] = self.ledger.data.setdefault("frozen", {}).setdefault(str(i), [])
        pids = self._signal(i, signal.SIGSTOP, frozen)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(proc_state(p) in ("T", "", "Z") for p in pids):
                break
            time.sleep(0.01)
        return pids

    def thaw_node(self, i: int) -> list[int]:
        """SIGCONT the processes :meth:`freeze_node` stopped on node ``i`` (those still in
        its namespace, so a reused PID is never hit). Returns their pids."""
        st = self.ledger.data
        frozen = st.get("frozen", {}).get(str(i), [])
        here = set(self.node_procs(i))
        pids = sorted(p for p in set(frozen) if p in here)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        st.get("frozen", {}).pop(str(i), None)
        self.ledger.save()
        return pids

    def link_down(self, i: int) -> None:
        """Set node ``i``'s ``ib`` interface down inside its namespace: a pulled cable.

        Peers get no TCP reset; their packets to the node are dropped (connects time out,
        or fail with *No route to host* once their ARP entry expires). The node's IPv6
        address is kept (``keep_addr_on_down``), so :meth:`link_up` restores everything.
        """
        self.node_sysctl(i, "net.ipv6.conf.ib.keep_addr_on_down", "1")
        down = self.ledger.data.setdefault("links_down", [])
        if i not in down:
            down.append(i)
            self.ledger.save()
        ip("-n", self.layout.node_ns(i), "link", "set", "ib", "down")

    def link_up(self, i: int) -> None:
        """Undo :meth:`link_down` (the addresses and routes come back at once)."""
        ip("-n", self.layout.node_ns(i), "link", "set", "ib", "up")
        down = self.ledger.data.get("links_down", [])
        if i in down:
            down.remove(i)
            self.ledger.save()

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Split the IB network into ``groups`` of node indices (disjoint; a node in no group
        keeps reaching every node): packets between nodes of different groups, IPv4 and IPv6,
        both directions, are lost without a trace, while every node still reaches the
        controller and its own group. Replaces an earlier partition; the mgmt network is left
        as it is.

        Inside each node's namespace, the IB addresses of the nodes in other groups get a
        permanent neighbour entry for :data:`NOWHERE_MAC`. The sender sees no error (a
        ``blackhole`` route would fail its connects at once with *Invalid argument*), so the
        peers see each other hang: connects and established connections time out, no reset.
        The entries are noted in the state file first; :meth:`heal` (and teardown) removes them.
        """
        side: dict[int, int] = {}
        for g, members in enumerate(groups):
            for i in members:
                if not 0 <= i < self.layout.nodes or i in side:
                    raise ValueError(f"node {i} twice or not a node of this cluster: {groups}")
                side[i] = g
        self.heal()
        cut: list[list[Any]] = self.ledger.data.setdefault("partition", [])
        for i, g in side.items():
            for j, h in side.items():
                if g != h:
                    cut += [[i, self.layout.ib_ip(j)], [i, self.layout.ib_ip6(j)]]
        self.ledger.save()
        for i, addr in cut:
            entry = [addr, "lladdr", NOWHERE_MAC, "dev", "ib", "nud", "permanent"]
            ip("-n", self.layout.node_ns(i), "neigh", "replace", *entry)

    def heal(self) -> None:
        """Undo :meth:`partition`: the neighbour entries go, so the addresses are resolved
        anew and established connections carry on at their next retransmission."""
        cut = self.ledger.data.get("partition", [])
        for i, addr in cut:
            ip("-n", self.layout.node_ns(i), "neigh", "del", addr, "dev", "ib", check=False)
        if cut:
            self.ledger.data["partition"] = []
            self.ledger.save()

    def node_sysctl(self, i: int, key: str, value: Optional[object] = None) -> str:
        """Read, or set and read back, a sysctl of node ``i``'s network namespace.

        Only ``net.*`` keys: inside a network namespace other than the machine's own, the
        kernel shows only the per-namespace ones (e.g. ``net.core.somaxconn``,
        ``net.ipv4.tcp_syn_retries``), so a write cannot change the machine's settings.
        Returns the value as ``sysctl -n`` prints it (several numbers: tab-separated).
        """
        if not _NET_SYSCTL.match(key):
            raise ValueError(f"only net.* sysctls are per network namespace: {key!r}")
        ns = self.layout.node_ns(i)
        sysctl = find_binary("sysctl") or "sysctl"
        if value is not None:
            run(["ip", "netns", "exec", ns, sysctl, "-q", "-w", f"{key}={value}"])
        return run(["ip", "netns", "exec", ns, sysctl, "-n", key]).stdout.strip()
