"""A node's preflight client: joins the collector, probes the peers it names, reads the verdict;
and the node's probe port. asyncio: many simulated nodes can share one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .. import network
from .collector import HELLO_TIMEOUT, RESULTS_GRACE, SEND_GRACE
from .report import NodeReport, describe_error, no_collector_reason
from .wire import MAX_LINE, PROTOCOL, Stream, within

#: Connect timeout towards a peer's probe port.
PROBE_TIMEOUT = 2.0
#: Connect timeout per attempt towards the endpoint (long enough to see EHOSTUNREACH after ARP).
ENDPOINT_CONNECT_TIMEOUT = 4.0
#: Pause between connection attempts to the endpoint.
RETRY_INTERVAL = 0.3
#: How much longer than its own deadline a client waits for the collector (start-up skew).
CLIENT_GRACE = 5.0
#: Each endpoint address gets one attempt of at least this long, even past a tiny timeout.
FIRST_ATTEMPT = 0.5


def probe_listener(address: str, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on an ephemeral port of ``address``."""
    family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Inherited by the accepted connections: their TIME_WAITs then do not keep a later
        # SO_REUSEADDR listener (the endpoint's, torch's store) off the same port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 0))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


#: accept() errors after which a probe port pauses for a second (as asyncio's servers do).
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: Linux: bind() to an address without taking a port yet; connect() picks one that is free for
#: its destination (binding thousands of sources to port 0 would use up the port range).
_BIND_ADDRESS_NO_PORT = getattr(
    socket, "IP_BIND_ADDRESS_NO_PORT", 24 if sys.platform.startswith("linux") else None
)


def source_socket(address: str, source: Optional[str]) -> socket.socket:
    """A non-blocking TCP socket for connecting to ``address``, bound to ``source`` if given."""
    family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if source is not None:
            if _BIND_ADDRESS_NO_PORT is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IP, _BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
    except OSError:
        sock.close()
        raise
    return sock


class ProbeServer:
    """A node's probe port: accepts connections and closes them at once. A reader callback
    on the listening socket, no transport or protocol per connection."""

    def __init__(self, listener: socket.socket, backlog: int = 128) -> None:
        self.listener = listener
        self.backlog = backlog
        self.port = int(listener.getsockname()[1])
        #: Connections accepted (how many peers probed this node).
        self.accepted = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._fd = listener.fileno()

    async def start(self) -> None:
        """Serve on the running event loop."""
        self.listener.setblocking(False)
        self.listener.listen(self.backlog)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._accept)

    def _accept(self) -> None:
        for _ in range(self.backlog):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRORS and self._loop is not None:
                    self._loop.remove_reader(self._fd)
                    self._loop.call_later(1.0, self._loop.add_reader, self._fd, self._accept)
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        """Stop serving (never raises)."""
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
        with contextlib.suppress(OSError):
            self.listener.close()


async def probe_peers(
    peers: Sequence[Tuple[int, str, int]], timeout: float, source: Optional[str] = None
) -> Dict[int, str]:
    """Connect to each ``(id, address, port)`` at once (from ``source`` if given), each within
    ``timeout``; id -> error for the failures. Non-blocking connects watched by the event loop:
    one future and one timer for all of them."""
    loop = asyncio.get_running_loop()
    errors: Dict[int, str] = {}
    pending: Dict[int, Tuple[socket.socket, int]] = {}  # fd -> (socket, peer id)
    done = loop.create_future()

    def settle(fd: int, error: Optional[str]) -> None:
        sock, peer = pending.pop(fd)
        loop.remove_writer(fd)
        if error is not None:
            errors[peer] = error
        sock.close()
        if not pending and not done.done():
            done.set_result(None)

    def connected(fd: int) -> None:
        code = pending[fd][0].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        settle(fd, os.strerror(code) if code else None)

    for peer, address, port in peers:
        try:
            sock = source_socket(address, source)
        except OSError as exc:
            errors[peer] = describe_error(exc)
            continue
        try:
            code = sock.connect_ex((address, port))
        except OSError as exc:
            errors[peer] = describe_error(exc)
            sock.close()
            continue
        if code in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            pending[sock.fileno()] = (sock, peer)
            loop.add_writer(sock.fileno(), connected, sock.fileno())
            continue
        if code:
            errors[peer] = os.strerror(code)
        sock.close()
    if not pending:
        return errors

    def expire() -> None:
        if not done.done():
            done.set_result(None)

    timer = loop.call_later(timeout, expire)
    try:
        await done
    finally:
        timer.cancel()
        for fd in list(pending):
            settle(fd, "timed out")
    return errors


@dataclass(frozen=True)
class NodeConfig:
    """Everything one node's preflight needs (built from a :class:`Prepared` by
    :func:`run_preflight`, or by hand in tests)."""

    report: NodeReport
    #: ``host:port`` as given, for messages.
    endpoint: str
    endpoint_addresses: Tuple[str, ...]
    port: int
    rdzv_id: str
    expected: int
    timeout: float
    #: Host names by node rank (Slurm's step nodelist), to name nodes that never joined.
    names_by_rank: Tuple[str, ...] = ()
    #: Where the collector listens (None: the wildcard address).
    listen_address: Optional[str] = None
    #: The source address of this node's connections (None: the kernel picks it). Set by the
    #: loopback benchmark, which gives every simulated node its own 127.x.y.z.
    source_address: Optional[str] = None
    #: This node's ``net.core.somaxconn`` as its facts found it (None: read it when needed).
    somaxconn: Optional[int] = None


@dataclass
class ClientOutcome:
    """What this node's client learnt."""

    reached: bool = False
    #: A collector answered this node's hello (joined or refused it).
    answered: bool = False
    #: The collector's verdict: whether it is OK, and its line (None: none arrived).
    ok: Optional[bool] = None
    line: Optional[str] = None
    problem: Optional[str] = None
    unreachable: Dict[int, str] = field(default_factory=dict)
    peer_names: Dict[int, str] = field(default_factory=dict)
    probed: bool = False
    #: The peer ids the collector gave this node to probe.
    targets: List[int] = field(default_factory=list)
    #: Connection attempts towards the endpoint.
    attempts: int = 0


async def _open(address: str, port: int, source: Optional[str]) -> Stream:
    sock = source_socket(address, source)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (address, port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE)
    except BaseException:
        sock.close()
        raise
    return Stream(reader, writer)


async def _connect(
    config: NodeConfig, deadline: float, out: ClientOutcome
) -> Tuple[Optional[Stream], Optional[BaseException]]:
    last: Optional[BaseException] = None
    first = True
    while True:
        for address in config.endpoint_addresses:
            left = deadline - time.monotonic()
            if first:
                left = max(left, FIRST_ATTEMPT)
            elif left <= 0:
                return None, last
            out.attempts += 1
            try:
                return await within(
                    _open(address, config.port, config.source_address),
                    time.monotonic() + min(ENDPOINT_CONNECT_TIMEOUT, left),
                ), None
            except OSError as exc:
                last = exc
        first = False
        if time.monotonic() + RETRY_INTERVAL >= deadline:
            return None, last
        await asyncio.sleep(RETRY_INTERVAL)


async def run_client(config: NodeConfig, deadline: float) -> ClientOutcome:
    """Join the collector at the endpoint, probe the peers it names, return its verdict."""
    out = ClientOutcome()
    stream, last = await _connect(config, deadline, out)
    if stream is None:
        if config.port == 0:
            out.problem = f"nothing can accept at {config.endpoint}: port 0 cannot be connected to"
        else:
            out.problem = no_collector_reason(config.endpoint, config.timeout, last)
        return out
    out.reached = True
    late = deadline + CLIENT_GRACE
    step = "join"
    try:
        hello = {
            "type": "hello",
            "proto": PROTOCOL,
            "rdzv_id": config.rdzv_id,
            "report": config.report.to_json(),
        }
        await stream.send(hello, time.monotonic() + HELLO_TIMEOUT)
        answer = await stream.recv(time.monotonic() + HELLO_TIMEOUT)
        if answer.get("type") == "reject":
            out.answered = True
            out.problem = f"the collector refused this node: {answer.get('message')}"
            return out
        if answer.get("type") != "joined":
            raise ValueError("unexpected answer")
        out.answered = True
        step = "peers"
        peers = await stream.recv(late)
        me = peers.get("you")
        targets: List[Tuple[int, str, int]] = []
        for p in peers.get("peers") or []:
            out.peer_names[int(p["id"])] = str(p.get("hostname") or "?")
            if p["id"] != me and p.get("address") and isinstance(p.get("port"), int):
                targets.append((int(p["id"]), str(p["address"]), int(p["port"])))
        out.targets = [t[0] for t in targets]
        out.unreachable = await probe_peers(targets, PROBE_TIMEOUT, config.source_address)
        out.probed = True
        step = "verdict"
        await stream.send({"type": "probes", "unreachable": out.unreachable}, late)
        final = await stream.recv(late + RESULTS_GRACE + SEND_GRACE)
        if final.get("type") != "verdict":
            raise ValueError("not a verdict")
        out.line = str(final.get("line"))
        out.ok = final.get("ok") is True
    except (OSError, ValueError, KeyError, TypeError) as exc:
        what = {
            "join": "did not answer as a torchrun_jsc preflight collector (is another "
            "program using the port?)",
            "peers": "sent no list of peers",
            "verdict": "sent no verdict",
        }[step]
        out.problem = f"the collector at {config.endpoint} {what} ({describe_error(exc)})"
    finally:
        stream.close()
    return out
