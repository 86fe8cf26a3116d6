"""Addresses, endpoints and the few network look-ups torchrun_jsc makes.

The pure helpers (:func:`split_endpoint`, :func:`is_loopback_host`, …) are used by the plan. The
probes (:func:`resolve`, :func:`route_source`, :func:`is_local_address`, :func:`interfaces`) are
used only by :mod:`torchrun_jsc.facts`; none of them sends a packet: a route lookup is a UDP
``connect()`` and a locality test is a ``bind()``. No reverse DNS, no ``getfqdn()``.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

from .errors import ConfigError
from .torch_defaults import RDZV_PORT

LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class Interface(NamedTuple):
    """One address of one network interface of this machine."""

    name: str
    address: str
    family: int  # 4 or 6


ENDPOINT_ACCEPTS = "HOST[:PORT] or [IPV6][:PORT], PORT an integer in 0..65535"


class Endpoint(NamedTuple):
    """A checked ``--rdzv_endpoint``: the host without brackets, the port if given."""

    text: str
    host: str
    port: Optional[int]

    @property
    def port_or_default(self) -> int:
        """The port torch's c10d rendezvous uses."""
        return RDZV_PORT if self.port is None else self.port

    @property
    def is_loopback(self) -> bool:
        """``localhost`` or a loopback address (left to torch untouched)."""
        return is_loopback_host(self.host)

    @property
    def is_wildcard(self) -> bool:
        """``0.0.0.0`` or ``::``: an address that names no node."""
        ip = ip_of(self.host)
        return ip is not None and ip.is_unspecified


def parse_endpoint(text: str) -> Endpoint:
    """Split ``host[:port]`` the way torch does and check both parts; ``[v6]`` brackets never
    stay on the host. Raises :class:`ConfigError` naming what is wrong."""
    stripped = text.strip()

    def bad(reason: str) -> ConfigError:
        return ConfigError(f"--rdzv_endpoint {text!r}: {reason}; accepted: {ENDPOINT_ACCEPTS}")

    if stripped.startswith("["):
        close = stripped.find("]")
        if close < 0:
            raise bad("unclosed '['")
        host, rest = stripped[1:close], stripped[close + 1 :]
        if rest and not rest.startswith(":"):
            raise bad("text after ']'")
        port_text: Optional[str] = rest[1:] if rest else None
        if ip_of(host) is None or ip_of(host).version != 6:  # type: ignore[union-attr]
            raise bad(f"{host!r} in brackets is not an IPv6 address")
    elif stripped.count(":") > 1:
        ip = ip_of(stripped)
        if ip is not None and ip.version == 6:
            raise bad("an IPv6 address needs brackets: [IPV6]:PORT")
        raise bad(f"{stripped!r} has more than one ':'")
    else:
        host, sep, tail = stripped.partition(":")
        port_text = tail if sep else None
    if not host:
        raise bad("no host")
    problem = host_problem(host)
    if problem:
        raise bad(problem)
    port: Optional[int] = None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
            raise bad(f"port {port_text!r} is not an integer in 0..65535")
        port = int(port_text)
    return Endpoint(text=stripped, host=host, port=port)


def host_problem(host: str) -> Optional[str]:
    """Why ``host`` cannot be a host name or address (None when it can): an address literal
    (IPv6 with an optional ``%zone``), or a name the resolver can encode (IDNA: no empty label,
    no label over 63 characters, at most 253 characters)."""
    if ip_of(host) is not None:
        return None
    if len(host) > 253:
        return f"host name of {len(host)} characters (at most 253)"
    if any(c.isspace() or c in "[]/%@" for c in host):
        return f"{host!r} is not a host name"
    try:
        host.encode("idna")
    except UnicodeError:
        return f"{host!r} is not a host name (empty label or a label over 63 characters)"
    return None


def ip_of(text: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    """The address ``text`` spells (an IPv6 zone index dropped), or None for a name."""
    address, zone, name = text.partition("%")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if zone and (ip.version != 6 or not name):
        return None
    return ip


def family_of(address: str) -> int:
    """4 or 6."""
    return 6 if ":" in address else 4


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback address literals (left to torch untouched)."""
    if host.lower() in LOCALHOST_NAMES:
        return True
    ip = ip_of(host)
    return ip is not None and ip.is_loopback


def format_host(address: str) -> str:
    """``address`` as it goes into a ``host:port`` string (IPv6 in brackets)."""
    return f"[{address}]" if ":" in address else address


# --------------------------------------------------------------------------- probes (I/O)


def resolve(
    host: str,
    timeout: float,
    interval: float = 0.5,
    retrying: Optional[Callable[[], None]] = None,
) -> List[str]:
    """The addresses ``host`` resolves to, in resolver order, retrying until ``timeout``
    (``retrying`` is called once, at the first retry).

    Raises ``OSError`` (a ``socket.gaierror``) when it still does not resolve.
    """
    if ip_of(host) is not None:
        return [host]
    deadline = time.monotonic() + timeout
    while True:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror:
            if time.monotonic() + interval > deadline:
                raise
            if retrying is not None:
                retrying()
                retrying = None
            time.sleep(interval)
            continue
        found: List[str] = []
        for info in infos:
            address = str(info[4][0]).split("%", 1)[0]
            if address not in found:
                found.append(address)
        return found


def _sockaddr(address: str, port: int) -> Tuple[int, Tuple[Any, ...]]:
    """``(family, sockaddr)`` for ``address``; a ``%zone`` becomes the IPv6 scope id."""
    family = socket.AF_INET6 if family_of(address) == 6 else socket.AF_INET
    info = socket.getaddrinfo(address, port, family, socket.SOCK_DGRAM, 0, socket.AI_NUMERICHOST)
    return family, info[0][4]


def route_source(address: str) -> Optional[str]:
    """This machine's source address for traffic to ``address`` (UDP connect: no packet sent).
    A link-local source keeps its ``%zone``."""
    try:
        family, target = _sockaddr(address, 9)
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(target)
            return str(sock.getsockname()[0])
    except OSError:
        return None


def is_local_address(address: str) -> bool:
    """True when ``address`` belongs to this machine (it can be bound; a ``%zone`` counts)."""
    try:
        family, target = _sockaddr(address, 0)
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind(target)
            return True
    except OSError:
        return False


def interfaces() -> List[Interface]:
    """Every IPv4 and IPv6 address of every interface (link-local IPv6 with its ``%zone``): on
    Linux from the kernel's netlink, elsewhere from ``psutil``."""
    import sys

    if sys.platform.startswith("linux"):
        from . import netlink

        names: Dict[int, str] = {}
        found: List[Interface] = []
        for index, address in netlink.addresses():
            if index not in names:
                try:
                    names[index] = socket.if_indextoname(index)
                except OSError:  # the interface went away meanwhile
                    continue
            found.append(_interface(names[index], address))
        return found
    import psutil

    return [
        _interface(name, str(addr.address))
        for name, addrs in psutil.net_if_addrs().items()
        for addr in addrs
        if addr.family in (socket.AF_INET, socket.AF_INET6) and ip_of(str(addr.address))
    ]


def _interface(name: str, address: str) -> Interface:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.is_link_local and "%" not in address:
        address = f"{address}%{name}"
    return Interface(name, address, ip.version)
