"""Layout of a namespace cluster: its subnets, addresses and the names of its pieces.

Node ``i`` of a cluster with prefix ``P`` lives in netns ``Pnode{i}`` (hostname
``node{i}``), with a ``mgmt`` interface on one of two mgmt cells (bridge ``PmgmtA`` for the
first half of the nodes, ``PmgmtB`` for the rest) and an ``ib`` interface on bridge ``Pib``,
which also joins the controller's netns ``Pctl``. Nothing here touches the machine.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

MGMT_NET = "10.77.0.0/16"
IB_NET = "10.78.0.0/16"
IB6_NET = "fd00:78::/64"
SUBNETS = (MGMT_NET, IB_NET, IB6_NET)
IB_BASE = 10  # default host number of node0 (node i is .(IB_BASE+i))
MAX_HOST_INDEX = 249  # highest node host number; the controller is above every node
CTL_HOST_INDEX = 250
MAX_NODES = 64
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")

CTL_IP = f"10.78.0.{CTL_HOST_INDEX}"
CTL_IP6 = f"fd00:78::{CTL_HOST_INDEX}"


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


def route_metric(prefix: str) -> int:
    """Metric of this prefix's root-namespace unreachable routes (tells clusters apart)."""
    return 1000 + zlib.crc32(prefix.encode()) % 60000


def route_family(net: str) -> str:
    """``ip`` option for the address family of ``net`` (``"-4"`` or ``"-6"``)."""
    return "-6" if ":" in net else "-4"


@dataclass(frozen=True)
class Layout:
    """Names and addresses of a cluster of ``nodes`` nodes under ``prefix``.

    ``ib_base`` is the host number of node0's addresses (node ``i`` gets
    ``10.78.0.(ib_base+i)``). Raises ValueError for a prefix, node count or base that does
    not fit the address plan.
    """

    nodes: int
    prefix: str
    ib_base: int = IB_BASE

    def __post_init__(self) -> None:
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(f"prefix must match {PREFIX_RE.pattern}: {self.prefix!r}")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes must be in 1..{MAX_NODES}")
        if self.ib_base < 1 or self.ib_base + self.nodes - 1 > MAX_HOST_INDEX:
            raise ValueError(
                f"ib_base must be >= 1 and ib_base + nodes - 1 <= {MAX_HOST_INDEX} "
                f"(got ib_base={self.ib_base}, nodes={self.nodes})"
            )

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
    def metric(self) -> int:
        """Metric of this cluster's unreachable routes (see :func:`route_metric`)."""
        return route_metric(self.prefix)

    def mgmt_ip(self, i: int) -> str:
        """Management IPv4 address of node ``i``, honouring ib_base."""
        return mgmt_ip(i, self.ib_base)

    def ib_ip(self, i: int) -> str:
        """IB IPv4 address of node ``i``, honouring ib_base."""
        return ib_ip(i, self.ib_base)

    def ib_ip6(self, i: int) -> str:
        """IB IPv6 address of node ``i``, honouring ib_base."""
        return ib_ip6(i, self.ib_base)

    def ib_names(self) -> set[str]:
        """Every name and address on the IB network (valid values for MASTER_ADDR)."""
        names = {CTL_IP, CTL_IP6}
        for i in range(self.nodes):
            names |= {f"node{i}i", f"node{i}i6", self.ib_ip(i), self.ib_ip6(i)}
        return names

    def bridges(self) -> list[str]:
        """The root-namespace bridges: mgmt cell A, mgmt cell B, ib."""
        return [f"{self.prefix}mgmtA", f"{self.prefix}mgmtB", f"{self.prefix}ib"]

    def mgmt_bridge(self, i: int) -> str:
        """The mgmt cell of node ``i``: A for the first half of the nodes, B for the rest."""
        mgmt_a, mgmt_b, _ = self.bridges()
        return mgmt_a if i < self.nodes // 2 or self.nodes == 1 else mgmt_b

    def veth(self, i: int, net: str) -> str:
        """Root-namespace end of node ``i``'s veth on ``net`` (``"m"`` mgmt, ``"i"`` ib)."""
        return f"{self.prefix}{i}{net}"

    @property
    def ctl_veth(self) -> str:
        """Root-namespace end of the controller's ib veth."""
        return f"{self.prefix}ci"

    def hosts_file(self) -> str:
        """``/etc/netns/<ns>/hosts`` of every namespace of the cluster."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for i in range(self.nodes):
            lines += [
                f"{self.mgmt_ip(i)} node{i}",
                f"{self.ib_ip(i)} node{i}i",
                f"{self.ib_ip6(i)} node{i}i6",
            ]
        lines += [f"{CTL_IP} ctl", f"{CTL_IP6} ctl6"]
        return "\n".join(lines) + "\n"

    def own_netns(self) -> re.Pattern[str]:
        """Matches the names of this prefix's namespaces (for leftovers without a state)."""
        return re.compile(rf"^{re.escape(self.prefix)}(node\d+|ctl)$")

    def own_links(self) -> re.Pattern[str]:
        """Matches the names of this prefix's bridges and veths (for leftovers)."""
        return re.compile(rf"^{re.escape(self.prefix)}(mgmtA|mgmtB|ib|\d+[mi]|ci)$")
