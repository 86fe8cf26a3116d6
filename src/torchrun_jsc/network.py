"""Addresses, endpoints and the few network look-ups torchrun_jsc makes.

The pure helpers (:func:`split_endpoint`, :func:`is_loopback_host`, …) are used by the plan. The
probes (:func:`resolve`, :func:`route_source`, :func:`is_local_address`, :func:`interfaces`) are
used only by :mod:`torchrun_jsc.facts`; none of them sends a packet: a route lookup is a UDP
``connect()`` and a locality test is a ``bind()``. No reverse DNS, no ``getfqdn()``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

from .envvars import shown
from .errors import ConfigError
from .torch_defaults import RDZV_PORT

LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class Interface(NamedTuple):
    """One address of one network interface of this machine."""

    name: str
    address: str
    family: int  # 4 or 6


ENDPOINT_ACCEPTS = "HOST[:PORT] or [IPV6][:PORT], PORT an integer in 0..65535"
#: The characters torch takes in an endpoint's host (``parse_rendezvous_endpoint``: word
#: characters, ``.``, ``:`` and ``-``); anything else stops torch's rendezvous with a traceback.
_TORCH_HOST = re.compile(r"[\w.:-]+")
_TORCH_PORT = re.compile(r"[0-9]{1,5}")


class Endpoint(NamedTuple):
    """A checked ``--rdzv_endpoint``: the host without brackets, the port if given."""

    text: str
    host: str
    port: Optional[int]
    #: A warning about how torch reads it (an IPv6 address and a port without brackets).
    note: Optional[str] = None

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
    """Split ``host[:port]`` exactly as torch's ``parse_rendezvous_endpoint`` does (1.13 to
    2.15 alike): a text in brackets is a host; otherwise the port is what follows the *last*
    ``:``, and brackets around the host are dropped. Then check both parts as torch does, and
    that the host can name a node. Raises :class:`ConfigError` naming what is wrong.

    ``::1:29400`` is host ``::1`` and port 29400 to torch: accepted, with a :attr:`Endpoint.note`
    that says so and how to write it unambiguously (``[::1]:29400``)."""
    stripped = text.strip()

    def bad(reason: str) -> ConfigError:
        return ConfigError(
            f"--rdzv_endpoint {shown(stripped)}: {reason}; accepted: {ENDPOINT_ACCEPTS}"
        )

    if stripped.startswith("[") and stripped.endswith("]"):
        host, port_text = stripped, None
    else:
        host, sep, tail = stripped.rpartition(":")
        host, port_text = (host, tail) if sep else (stripped, None)
    bracketed = len(host) > 1 and host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if "[" in host or "]" in host or "]" in (port_text or ""):
        if stripped.startswith("[") and "]" not in stripped:
            raise bad("unclosed '['")
        if stripped.startswith("["):
            raise bad("text after ']'")
        raise bad("brackets go around a whole IPv6 address only: [IPV6]:PORT")
    if port_text is not None and not (_TORCH_PORT.fullmatch(port_text) and int(port_text) <= 65535):
        raise bad(f"port {shown(port_text)} is not an integer in 0..65535 (at most 5 digits)")
    port = None if port_text is None else int(port_text)
    if not host:
        raise bad("no host")
    if not _TORCH_HOST.fullmatch(host):
        if "%" in host and ip_of(host) is not None:
            raise bad("torch takes no '%zone' in an endpoint host")
        raise bad(
            f"{shown(host)} is not a host name: torch takes letters, digits, '.', ':', '-' and"
            " '_' only"
        )
    ip = ip_of(host)
    if ":" in host and (ip is None or ip.version != 6):
        whole = ip_of(stripped)
        if whole is not None and whole.version == 6:
            raise bad(
                f"an IPv6 address needs brackets: [IPV6]:PORT (torch reads host {shown(host)},"
                f" port {port})"
            )
        raise bad(f"{shown(host)} (before the last ':') is neither an address nor a host name")
    problem = host_problem(host)
    if problem:
        raise bad(problem)
    note = None
    if ip is not None and ip.version == 6 and not bracketed and port is not None:
        note = (
            f"--rdzv_endpoint {shown(stripped)} has no brackets: torch reads it as host {host},"
            f" port {port}; write [{host}]:{port}"
        )
        whole = ip_of(stripped)
        if whole is not None and whole.version == 6:
            note += f" (for the address {stripped}, write [{stripped}]:PORT)"
    return Endpoint(text=stripped, host=host, port=port, note=note)


def host_problem(host: str) -> Optional[str]:
    """Why ``host`` cannot be a host name or address (None when it can): an address literal
    (IPv6 with an optional ``%zone``), or a name the resolver can encode (IDNA: no empty label,
    no label over 63 characters, at most 253 characters)."""
    if ip_of(host) is not None:
        return None
    if len(host) > 253:
        return f"host name of {len(host)} characters (at most 253)"
    if any(c.isspace() or c in "[]/%@" for c in host):
        return f"{shown(host)} is not a host name"
    try:
        host.encode("idna")
    except UnicodeError:
        return f"{shown(host)} is not a host name (empty label or a label over 63 characters)"
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
