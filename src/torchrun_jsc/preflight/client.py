"""A node's preflight client: joins the collector, probes the peers it names, reads the verdict;
and the node's probe port. asyncio: many simulated nodes can share one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
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
        sock.bind((address, 0))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class _CloseAtOnce(asyncio.Protocol):
    def __init__(self, server: ProbeServer) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.server.accepted += 1
        transport.close()


class ProbeServer:
    """A node's probe port: accepts connections and closes them at once."""

    def __init__(self, listener: socket.socket, backlog: int = 128) -> None:
        self.listener = listener
        self.backlog = backlog
        self.port = int(listener.getsockname()[1])
        #: Connections accepted (how many peers probed this node).
        self.accepted = 0
        self._server: Optional[asyncio.AbstractServer] = None

    async def start(self) -> None:
        """Serve on the running event loop."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _CloseAtOnce(self), sock=self.listener, backlog=self.backlog
        )

    def close(self) -> None:
        """Stop serving (never raises)."""
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(OSError):
            self.listener.close()


async def probe_peers(
    peers: Sequence[Tuple[int, str, int]], timeout: float, source: Optional[str] = None
) -> Dict[int, str]:
    """Connect to each ``(id, address, port)`` at once (from ``source`` if given); id -> error
    for the failures."""
    loop = asyncio.get_running_loop()

    async def one(address: str, port: int) -> Optional[str]:
        family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            return describe_error(exc)
        try:
            sock.setblocking(False)
            if source is not None:
                sock.bind((source, 0))
            await within(loop.sock_connect(sock, (address, port)), time.monotonic() + timeout)
            return None
        except OSError as exc:
            return describe_error(exc)
        finally:
            sock.close()

    errors = await asyncio.gather(*(one(address, port) for _, address, port in peers))
    return {peer[0]: err for peer, err in zip(peers, errors) if err is not None}


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


async def _connect(
    config: NodeConfig, deadline: float
) -> Tuple[Optional[Stream], Optional[BaseException]]:
    last: Optional[BaseException] = None
    local = None if config.source_address is None else (config.source_address, 0)
    first = True
    while True:
        for address in config.endpoint_addresses:
            left = deadline - time.monotonic()
            if first:
                left = max(left, FIRST_ATTEMPT)
            elif left <= 0:
                return None, last
            try:
                reader, writer = await within(
                    asyncio.open_connection(address, config.port, limit=MAX_LINE, local_addr=local),
                    time.monotonic() + min(ENDPOINT_CONNECT_TIMEOUT, left),
                )
                return Stream(reader, writer), None
            except OSError as exc:
                last = exc
        first = False
        if time.monotonic() + RETRY_INTERVAL >= deadline:
            return None, last
        await asyncio.sleep(RETRY_INTERVAL)


async def run_client(config: NodeConfig, deadline: float) -> ClientOutcome:
    """Join the collector at the endpoint, probe the peers it names, return its verdict."""
    out = ClientOutcome()
    stream, last = await _connect(config, deadline)
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
