"""A node's preflight client: joins the collector, probes the peers it names, reads the verdict."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import network
from .collector import HELLO_TIMEOUT, RESULTS_GRACE, SEND_GRACE
from .report import NodeReport, describe_error, no_collector_reason
from .wire import PROTOCOL, Channel

#: Connect timeout towards a peer's probe port.
PROBE_TIMEOUT = 2.0
#: Connect timeout per attempt towards the endpoint (long enough to see EHOSTUNREACH after ARP).
ENDPOINT_CONNECT_TIMEOUT = 4.0
#: Pause between connection attempts to the endpoint.
RETRY_INTERVAL = 0.3
#: How much longer than its own deadline a client waits for the collector (start-up skew).
CLIENT_GRACE = 5.0


def _serve_and_close(listener: socket.socket, stop: threading.Event) -> None:
    """Accept connections and close them at once (a probe port) until ``stop``."""
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        conn.close()


def probe_listener(address: str) -> socket.socket:
    """A listening TCP socket on an ephemeral port of ``address``."""
    family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def probe_peers(peers: Sequence[Tuple[int, str, int]], timeout: float) -> Dict[int, str]:
    """Connect to each ``(id, address, port)`` in parallel; id -> error for the failures."""

    def one(peer: Tuple[int, str, int]) -> Optional[str]:
        _, address, port = peer
        try:
            with socket.create_connection((address, port), timeout=timeout):
                return None
        except OSError as exc:
            return describe_error(exc)

    if not peers:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(peers))) as pool:
        errors = list(pool.map(one, peers))
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


@dataclass
class ClientOutcome:
    """What this node's client learnt."""

    reached: bool = False
    #: The collector's verdict: whether it is OK, and its line (None: none arrived).
    ok: Optional[bool] = None
    line: Optional[str] = None
    problem: Optional[str] = None
    unreachable: Dict[int, str] = field(default_factory=dict)
    peer_names: Dict[int, str] = field(default_factory=dict)
    probed: bool = False


def _connect(config: NodeConfig, deadline: float) -> Tuple[Optional[socket.socket], Any]:
    last: Optional[BaseException] = None
    while True:
        for address in config.endpoint_addresses:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, last
            try:
                sock = socket.create_connection(
                    (address, config.port), timeout=min(ENDPOINT_CONNECT_TIMEOUT, left)
                )
                return sock, None
            except OSError as exc:
                last = exc
        if time.monotonic() + RETRY_INTERVAL >= deadline:
            return None, last
        time.sleep(RETRY_INTERVAL)


def run_client(config: NodeConfig, deadline: float) -> ClientOutcome:
    """Join the collector at the endpoint, probe the peers it names, return its verdict."""
    out = ClientOutcome()
    sock, last = _connect(config, deadline)
    if sock is None:
        out.problem = no_collector_reason(config.endpoint, config.timeout, last)
        return out
    out.reached = True
    channel = Channel(sock)
    late = deadline + CLIENT_GRACE
    step = "join"
    try:
        hello = {
            "type": "hello",
            "proto": PROTOCOL,
            "rdzv_id": config.rdzv_id,
            "report": config.report.to_json(),
        }
        channel.send(hello, time.monotonic() + HELLO_TIMEOUT)
        answer = channel.recv(time.monotonic() + HELLO_TIMEOUT)
        if answer.get("type") == "reject":
            out.problem = f"the collector refused this node: {answer.get('message')}"
            return out
        if answer.get("type") != "joined":
            raise ValueError("unexpected answer")
        step = "peers"
        peers = channel.recv(late)
        me = peers.get("you")
        targets: List[Tuple[int, str, int]] = []
        for p in peers.get("peers") or []:
            out.peer_names[int(p["id"])] = str(p.get("hostname") or "?")
            if p["id"] != me and p.get("address") and isinstance(p.get("port"), int):
                targets.append((int(p["id"]), str(p["address"]), int(p["port"])))
        out.unreachable = probe_peers(targets, PROBE_TIMEOUT)
        out.probed = True
        step = "verdict"
        channel.send({"type": "probes", "unreachable": out.unreachable}, late)
        final = channel.recv(late + RESULTS_GRACE + SEND_GRACE)
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
        channel.close()
    return out
