"""Node facts for the cluster layouts the unit tests plan for (no machine is looked at).

The layout is the namespace cluster's (tests/cluster/harness.py): node ``i`` has ``mgmt``
10.77.0.(10+i) (its hostname's network) and ``ib`` 10.78.0.(10+i) plus fd00:78::(10+i), the
digits written as in IPv4 (the network every node reaches).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.network import Interface


def mgmt(i: int) -> str:
    return f"10.77.0.{10 + i}"


def ib(i: int) -> str:
    return f"10.78.0.{10 + i}"


def ib6(i: int) -> str:
    return f"fd00:78::{10 + i}"


def node(
    i: int,
    endpoint_host: Optional[str] = "node0i",
    endpoint_addresses: Tuple[str, ...] = (ib(0),),
    resolve_error: Optional[str] = None,
    routable: bool = True,
) -> NodeFacts:
    """Facts of node ``i`` when the endpoint resolves to ``endpoint_addresses``."""
    mine = {mgmt(i), ib(i), ib6(i)}
    routes: Dict[str, Optional[str]] = {}
    for address in endpoint_addresses:
        if not routable:
            routes[address] = None
        elif address in mine:
            routes[address] = address
        elif address.startswith("10.78."):
            routes[address] = ib(i)
        elif address.startswith("fd00:78:"):
            routes[address] = ib6(i)
        elif address.startswith("10.77."):
            routes[address] = mgmt(i)
        else:
            routes[address] = None
    return NodeFacts(
        hostname=f"node{i}",
        interfaces=(
            Interface("lo", "127.0.0.1", 4),
            Interface("mgmt", mgmt(i), 4),
            Interface("ib", ib(i), 4),
            Interface("ib", ib6(i), 6),
        ),
        endpoint_host=endpoint_host,
        endpoint_addresses=() if resolve_error else endpoint_addresses,
        resolve_error=resolve_error,
        route_sources=routes,
        local_endpoint_addresses=tuple(a for a in endpoint_addresses if a in mine),
        python_version=(3, 11),
    )
