"""This machine's interface addresses on Linux, from the kernel's routing netlink (what
``ip address`` and ``getifaddrs`` read): one ``RTM_GETADDR`` dump request, no packet on any network.

:func:`parse` is pure (bytes in, addresses out); :func:`addresses` asks the kernel.
"""

from __future__ import annotations

import socket
import struct
from typing import List, Optional, Tuple

#: Message types and flags of ``linux/netlink.h`` and ``linux/rtnetlink.h``.
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWADDR, RTM_GETADDR = 20, 22
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
#: Attributes of an address message (``linux/if_addr.h``).
IFA_ADDRESS, IFA_LOCAL = 1, 2

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefix length, flags, scope, index
_ATTR = struct.Struct("=HH")  # rtattr: length, type

#: ``(interface index, address text)``.
Address = Tuple[int, str]


class NetlinkError(OSError):
    """The kernel answered the dump with an error, or the answer was cut short."""


def request(sequence: int = 1) -> bytes:
    """The dump request for every address of every family."""
    body = _IFADDR.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    flags = NLM_F_REQUEST | NLM_F_DUMP
    return _HEADER.pack(_HEADER.size + len(body), RTM_GETADDR, flags, sequence, 0) + body


def _align(n: int) -> int:
    return (n + 3) & ~3


def parse(data: bytes) -> Tuple[List[Address], bool]:
    """The addresses in one chunk of the kernel's answer, and whether it was the last chunk.

    For IPv4 the interface's own address is ``IFA_LOCAL`` (``IFA_ADDRESS`` is the peer of a
    point-to-point link); IPv6 has only ``IFA_ADDRESS``.
    """
    found: List[Address] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            raise NetlinkError("a netlink message is cut short")
        if kind == NLMSG_DONE:
            return found, True
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + _HEADER.size)
            raise NetlinkError(-code, "the kernel refused the address dump")
        if kind == RTM_NEWADDR:
            entry = _address(data[offset + _HEADER.size : offset + length])
            if entry is not None:
                found.append(entry)
        offset += _align(length)
    return found, False


def _address(body: bytes) -> Optional[Address]:
    if len(body) < _IFADDR.size:
        return None
    family, _, _, _, index = _IFADDR.unpack_from(body)
    sizes = {socket.AF_INET: 4, socket.AF_INET6: 16}
    if family not in sizes:
        return None
    attrs = {}
    offset = _IFADDR.size
    while offset + _ATTR.size <= len(body):
        length, kind = _ATTR.unpack_from(body, offset)
        if length < _ATTR.size:
            break
        attrs[kind] = body[offset + _ATTR.size : offset + length]
        offset += _align(length)
    raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
    if raw is None or len(raw) != sizes[family]:
        return None
    return index, socket.inet_ntop(family, raw)


def addresses(timeout: float = 2.0) -> List[Address]:
    """Every address of every interface, as the kernel lists them. Raises OSError."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as sock:  # NETLINK_ROUTE
        sock.settimeout(timeout)
        sock.bind((0, 0))
        sock.send(request())
        found: List[Address] = []
        while True:
            chunk, done = parse(sock.recv(65536))
            found += chunk
            if done:
                return found
