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
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from .errors import ConfigError

LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@dataclass(frozen=True)
class Interface:
    """One address of one network interface of this machine."""

    name: str
    address: str
    family: int  # 4 or 6


def split_endpoint(endpoint: str) -> Tuple[str, Optional[int]]:
    """Split ``host[:port]`` the way torch does; ``[v6]`` brackets never stay on the host.

    Raises :class:`ConfigError` for an empty host or a port that is not an integer in 0..65535.
    """
    text = endpoint.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ConfigError(
                f"--rdzv_endpoint {endpoint!r}: unclosed '['; accepted: HOST[:PORT], [IPV6][:PORT]"
            )
        host, rest = text[1:close], text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise ConfigError(
                f"--rdzv_endpoint {endpoint!r}: text after ']'; accepted: [IPV6][:PORT]"
            )
        port_text: Optional[str] = rest[1:] if rest else None
    elif text.count(":") > 1:
        # An unbracketed IPv6 literal has no port (torch would cut it at the last colon).
        raise ConfigError(
            f"--rdzv_endpoint {endpoint!r}: an IPv6 address needs brackets; accepted: [IPV6]:PORT"
        )
    else:
        host, _, tail = text.partition(":")
        port_text = tail if ":" in text else None
    if not host:
        raise ConfigError(f"--rdzv_endpoint {endpoint!r}: no host; accepted: HOST[:PORT]")
    port: Optional[int] = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ConfigError(
                f"--rdzv_endpoint {endpoint!r}: port {port_text!r} is not an integer in 0..65535"
            )
        port = int(port_text)
    return host, port


def ip_of(text: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    """The address ``text`` spells (zone index dropped), or None for a name."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


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


def resolve(host: str, timeout: float, interval: float = 0.5) -> List[str]:
    """The addresses ``host`` resolves to, in resolver order, retrying until ``timeout``.

    Raises ``OSError`` (a ``socket.gaierror``) when it still does not resolve.
    """
    literal = ip_of(host)
    if literal is not None:
        return [str(literal)]
    deadline = time.monotonic() + timeout
    while True:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror:
            if time.monotonic() + interval > deadline:
                raise
            time.sleep(interval)
            continue
        found: List[str] = []
        for info in infos:
            address = str(info[4][0]).split("%", 1)[0]
            if address not in found:
                found.append(address)
        return found


def route_source(address: str) -> Optional[str]:
    """This machine's source address for traffic to ``address`` (UDP connect: no packet sent)."""
    family = socket.AF_INET6 if family_of(address) == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return str(sock.getsockname()[0]).split("%", 1)[0]
    except OSError:
        return None


def is_local_address(address: str) -> bool:
    """True when ``address`` belongs to this machine (it can be bound)."""
    family = socket.AF_INET6 if family_of(address) == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
            return True
    except OSError:
        return False


def interfaces() -> List[Interface]:
    """Every IPv4 and IPv6 address of every interface (link-local IPv6 left out)."""
    import psutil

    found: List[Interface] = []
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = str(addr.address).split("%", 1)[0]
            ip = ip_of(address)
            if ip is None or (ip.version == 6 and ip.is_link_local):
                continue
            found.append(Interface(name, address, ip.version))
    return found
