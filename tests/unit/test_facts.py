"""Fact gathering without psutil: interface addresses from the kernel's netlink (parser tables,
and the real dump against psutil's view), the Slurm step daemon's age from /proc."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from torchrun_jsc import facts, netlink, network


def message(kind: int, body: bytes = b"") -> bytes:
    raw = struct.pack("=IHHII", 16 + len(body), kind, 2, 1, 0) + body
    return raw + b"\0" * (-len(raw) % 4)


def attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def address(family: int, index: int, *attrs: bytes) -> bytes:
    return message(
        netlink.RTM_NEWADDR, struct.pack("=BBBBI", family, 24, 0, 0, index) + b"".join(attrs)
    )


V4, V6 = socket.AF_INET, socket.AF_INET6
IP4 = socket.inet_pton(V4, "10.78.0.11")
PEER = socket.inet_pton(V4, "10.78.0.1")
IP6 = socket.inet_pton(V6, "fd00:78::11")


@pytest.mark.parametrize(
    ("data", "expected", "done"),
    [
        (message(netlink.NLMSG_DONE, b"\0" * 4), [], True),
        (address(V4, 3, attr(netlink.IFA_ADDRESS, IP4)), [(3, "10.78.0.11")], False),
        # point-to-point: IFA_ADDRESS is the peer, IFA_LOCAL the interface's own
        (
            address(V4, 5, attr(netlink.IFA_ADDRESS, PEER), attr(netlink.IFA_LOCAL, IP4)),
            [(5, "10.78.0.11")],
            False,
        ),
        (address(V6, 4, attr(netlink.IFA_ADDRESS, IP6)), [(4, "fd00:78::11")], False),
        (
            address(V4, 3, attr(netlink.IFA_LOCAL, IP4))
            + address(V6, 3, attr(8, b"\1\2\3\4"), attr(netlink.IFA_ADDRESS, IP6))
            + message(netlink.NLMSG_DONE, b"\0" * 4),
            [(3, "10.78.0.11"), (3, "fd00:78::11")],
            True,
        ),
        (address(17, 3, attr(netlink.IFA_ADDRESS, b"\1" * 6)), [], False),  # not IP: skipped
        (address(V4, 3, attr(netlink.IFA_ADDRESS, IP6)), [], False),  # wrong length: skipped
        (address(V4, 3), [], False),  # no address at all
        (message(24, b"\0" * 12), [], False),  # another message type
    ],
)
def test_netlink_parse(data: bytes, expected: List[Tuple[int, str]], done: bool) -> None:
    assert netlink.parse(data) == (expected, done)


def test_netlink_errors_and_cut_messages() -> None:
    with pytest.raises(netlink.NetlinkError):
        netlink.parse(message(netlink.NLMSG_ERROR, struct.pack("=i", -1) + b"\0" * 16))
    whole = address(V4, 3, attr(netlink.IFA_LOCAL, IP4))
    with pytest.raises(netlink.NetlinkError, match="cut short"):
        netlink.parse(whole[:-4])


def test_netlink_request_asks_for_a_dump_of_every_family() -> None:
    raw = netlink.request(7)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", raw)
    assert (length, kind, seq) == (len(raw), netlink.RTM_GETADDR, 7)
    assert flags == netlink.NLM_F_REQUEST | netlink.NLM_F_DUMP
    assert raw[16] == socket.AF_UNSPEC


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink is Linux's")
def test_interfaces_are_what_psutil_sees() -> None:
    """The kernel's answer, read by torchrun_jsc, against psutil's (getifaddrs) on this machine
    (under ``unshare -n`` that is loopback alone)."""
    psutil = pytest.importorskip("psutil")
    ours = sorted((i.name, i.address, i.family) for i in network.interfaces())
    theirs = sorted(
        (name, network._interface(name, str(a.address)).address, 4 if a.family == V4 else 6)
        for name, addrs in psutil.net_if_addrs().items()
        for a in addrs
        if a.family in (V4, V6)
    )
    assert ours == theirs


def test_link_local_ipv6_gets_its_zone() -> None:
    assert network._interface("ib0", "fe80::1").address == "fe80::1%ib0"
    assert network._interface("ib0", "fd00::1").address == "fd00::1"
    assert network._interface("ib0", "10.0.0.1").family == 4


STEP_CHILD = "from torchrun_jsc import facts; print(facts.step_age())"
#: Run by a process named slurmstepd: after 1.5 s, a shell in between, then the one that asks.
DAEMON = (
    "import subprocess, time\n"
    "time.sleep(1.5)\n"
    "subprocess.run(['sh', '-c', '\"$0\" -c \"$1\"; true', {python!r}, {child!r}])\n"
)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_step_age_is_the_age_of_the_nearest_step_daemon(tmp_path: Path) -> None:
    # a link to an interpreter: the process gets that name (outside the venv: stdlib only)
    daemon = tmp_path / "slurmstepd"
    daemon.symlink_to(sys.executable)
    started = time.time()
    out = subprocess.run(
        [str(daemon), "-c", DAEMON.format(python=sys.executable, child=STEP_CHILD)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.time() - started
    age = float(out.stdout.strip())
    assert 1.4 <= age <= took + 0.1, (age, took, out.stderr)


@pytest.mark.skipif("SLURM_STEP_ID" in os.environ, reason="these tests run inside a Slurm step")
def test_step_age_outside_slurm_is_none() -> None:
    assert facts.step_age() is None


def test_resolve_says_once_that_it_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: List[object] = [socket.gaierror(-2, "no"), socket.gaierror(-2, "no")]

    def getaddrinfo(host: str, *args: object, **kw: object) -> object:
        if answers:
            raise answers.pop(0)  # type: ignore[misc]
        return [(V4, socket.SOCK_STREAM, 6, "", ("10.78.0.10", 0))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    told: List[str] = []
    found = network.resolve("node0i", 5.0, interval=0.01, retrying=lambda: told.append("x"))
    assert found == ["10.78.0.10"] and told == ["x"]
    answers[:] = [socket.gaierror(-2, "no")] * 1000
    with pytest.raises(socket.gaierror):
        network.resolve("node0i", 0.05, interval=0.01, retrying=lambda: told.append("y"))
    assert told == ["x", "y"]
