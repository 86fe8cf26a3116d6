"""``TORCHRUN_JSC_PREFLIGHT=1``: check the whole job within seconds, launch nothing.

Every node is a client; a node that considers itself host also runs a collector on the
rendezvous endpoint's port (wildcard address). The wire protocol is line-delimited JSON, with a
deadline on every socket operation:

1. client -> collector ``hello`` (protocol, rdzv id, this node's report: hostname, node rank,
   is_host, advertised address, probe port, interface, plan warnings and predicted failures);
   collector -> client ``joined`` (id, expected node count) or ``reject``.
2. When the expected nodes have joined (or at the deadline): collector -> every client
   ``peers``; each client connects to every other node's probe port (on its advertised address)
   and answers ``probes`` (peer id -> error).
3. collector -> every client ``verdict``; the collector's node prints the per-node table.

The pure parts (:func:`expected_nodes`, :func:`missing_names`, :func:`compute_verdict`,
:func:`render_table`) take plain data; :func:`run_node` is the socket part, usable on loopback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from . import launch_args, network
from .apply import Prepared

PROTOCOL = "torchrun_jsc-preflight/1"
#: torch's c10d rendezvous port when ``--rdzv_endpoint`` has none.
DEFAULT_PORT = 29400
#: Connect timeout towards a peer's probe port.
PROBE_TIMEOUT = 2.0
#: Connect timeout per attempt towards the endpoint (long enough to see EHOSTUNREACH after ARP).
ENDPOINT_CONNECT_TIMEOUT = 4.0
#: Pause between connection attempts to the endpoint.
RETRY_INTERVAL = 0.3
#: How long the collector waits for a hello line, and a client for the collector's answer.
HELLO_TIMEOUT = 5.0
#: How long the collector waits for probe results after sending the peers.
RESULTS_GRACE = PROBE_TIMEOUT + 3.0
#: How long the collector may take to send one round of messages to every node.
SEND_GRACE = 3.0
#: How much longer than its own deadline a client waits for the collector (start-up skew).
CLIENT_GRACE = 5.0
MAX_LINE = 1 << 20


# --------------------------------------------------------------------------- data (pure)


@dataclass(frozen=True)
class NodeReport:
    """What one node says about itself (the ``hello`` message)."""

    hostname: str
    node_rank: Optional[int] = None
    is_host: Optional[bool] = None
    address: Optional[str] = None
    probe_port: Optional[int] = None
    interface: Optional[str] = None
    warnings: Tuple[str, ...] = ()
    failures: Tuple[str, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        """The report as a JSON object."""
        return {
            "hostname": self.hostname,
            "node_rank": self.node_rank,
            "is_host": self.is_host,
            "address": self.address,
            "probe_port": self.probe_port,
            "interface": self.interface,
            "warnings": list(self.warnings),
            "failures": list(self.failures),
        }

    @classmethod
    def from_json(cls, data: object) -> NodeReport:
        """Read a report; raises ``ValueError`` for anything malformed."""
        if not isinstance(data, dict):
            raise ValueError("report is not an object")

        def opt(key: str, kind: type) -> Any:
            value = data.get(key)
            wrong_bool = isinstance(value, bool) and kind is not bool
            if value is not None and (wrong_bool or not isinstance(value, kind)):
                raise ValueError(f"report field {key!r} is not a {kind.__name__}")
            return value

        def texts(key: str) -> Tuple[str, ...]:
            value = data.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"report field {key!r} is not a list of strings")
            return tuple(value)

        hostname = data.get("hostname")
        if not isinstance(hostname, str):
            raise ValueError("report has no hostname")
        return cls(
            hostname=hostname,
            node_rank=opt("node_rank", int),
            is_host=opt("is_host", bool),
            address=opt("address", str),
            probe_port=opt("probe_port", int),
            interface=opt("interface", str),
            warnings=texts("warnings"),
            failures=texts("failures"),
        )


@dataclass(frozen=True)
class Member:
    """A node as the collector saw it: its report and what happened afterwards."""

    id: int
    report: NodeReport
    #: Peer id -> why it could not be reached; None when no probe results arrived.
    unreachable: Optional[Dict[int, str]] = None
    #: What went wrong talking to this node after it joined (None: nothing).
    problem: Optional[str] = None


@dataclass(frozen=True)
class Verdict:
    """The job-wide outcome."""

    ok: bool
    nodes: int
    reasons: Tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """``preflight: OK (4 nodes)`` or ``preflight: FAIL: <reason>; <reason>``."""
        if self.ok:
            return f"preflight: OK ({self.nodes} node{'s' if self.nodes != 1 else ''})"
        return "preflight: FAIL: " + "; ".join(self.reasons)


def expected_nodes(nnodes: str, env: Mapping[str, str]) -> int:
    """How many nodes the preflight waits for.

    ``--nnodes=N``: N. ``MIN:MAX``: the step's node count (``SLURM_STEP_NUM_NODES``, else
    ``SLURM_NNODES``) when it lies in MIN..MAX, else MAX. Unreadable: the Slurm count, else 1.
    """
    slurm: Optional[int] = None
    for name in ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        text = (env.get(name) or "").strip()
        if text.isdigit() and int(text) > 0:
            slurm = int(text)
            break
    low_text, _, high_text = nnodes.strip().partition(":")
    try:
        low = int(low_text)
        high = int(high_text) if high_text else low
    except ValueError:
        return slurm or 1
    if low < 1 or high < low:
        return slurm or max(high, 1)
    if low == high:
        return high
    return slurm if slurm is not None and low <= slurm <= high else high


def missing_names(
    reports: Sequence[NodeReport], expected: int, names_by_rank: Sequence[str] = ()
) -> List[str]:
    """Names for the nodes that never joined: by node rank when every report has one."""
    count = expected - len(reports)
    if count <= 0:
        return []
    ranks = [r.node_rank for r in reports]
    if all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        absent = [k for k in range(expected) if k not in ranks][:count]
        names = [names_by_rank[k] if k < len(names_by_rank) else f"node rank {k}" for k in absent]
        if len(names) == count:
            return names
    seen = {r.hostname for r in reports}
    unseen = [n for n in names_by_rank if n not in seen][:count]
    if len(unseen) == count:
        return unseen
    return [f"{count} of {expected} nodes"]


def labels(members: Sequence[Member]) -> Dict[int, str]:
    """Member id -> a unique display name (hostname, disambiguated when it repeats)."""
    counts: Dict[str, int] = {}
    for m in members:
        counts[m.report.hostname] = counts.get(m.report.hostname, 0) + 1
    out: Dict[int, str] = {}
    for m in members:
        name = m.report.hostname or "?"
        if counts[m.report.hostname] > 1:
            rank = m.report.node_rank
            name += f"[rank {rank}]" if rank is not None else f"[#{m.id}]"
        out[m.id] = name
    return out


def _where(report: NodeReport) -> str:
    if report.address is None:
        return "no address"
    port = f":{report.probe_port}" if report.probe_port is not None else ""
    return network.format_host(report.address) + port


def by_rank(members: Sequence[Member]) -> List[Member]:
    """``members`` ordered by node rank (none last), then by join order."""
    return sorted(
        members, key=lambda m: (m.report.node_rank is None, m.report.node_rank or 0, m.id)
    )


def compute_verdict(
    members: Sequence[Member], expected: int, missing: Sequence[str], endpoint: str
) -> Verdict:
    """The verdict from what the collector gathered; reasons name each broken node."""
    names = labels(members)
    members = by_rank(members)
    reasons: List[str] = []
    hosts = [names[m.id] for m in members if m.report.is_host]
    if len(hosts) > 1:
        reasons.append(f"{len(hosts)} nodes consider themselves host: {', '.join(hosts)}")
    elif members and not hosts:
        reasons.append("no node that reached the collector considers itself host")
    claims: Dict[int, List[str]] = {}
    for m in members:
        if m.report.node_rank is not None:
            claims.setdefault(m.report.node_rank, []).append(names[m.id])
    reasons += [
        f"node rank {rank} is claimed by {len(who)} nodes: {', '.join(who)}"
        for rank, who in sorted(claims.items())
        if len(who) > 1
    ]
    reasons += [f"{name}: never reached the endpoint {endpoint}" for name in missing]
    for m in members:
        reasons += [f"{names[m.id]}: {failure}" for failure in m.report.failures]
        if m.problem is not None:
            reasons.append(f"{names[m.id]}: {m.problem}")
    ids = {m.id for m in members}
    for target in members:
        if target.report.address is None or target.report.probe_port is None:
            continue
        sources = [
            (names[m.id], m.unreachable[target.id])
            for m in members
            if m.unreachable is not None and target.id in m.unreachable
        ]
        if not sources:
            continue
        probers = [m for m in members if m.unreachable is not None and m.id != target.id]
        who = (
            "every other node"
            if len(sources) == len(probers) > 1
            else ", ".join(name for name, _ in sources)
        )
        errors = sorted({err for _, err in sources})
        reasons.append(
            f"{names[target.id]}: its address {_where(target.report)} is unreachable from "
            f"{who} ({', '.join(errors)})"
        )
    for m in members:
        unknown = set(m.unreachable or ()) - ids
        if unknown:
            reasons.append(f"{names[m.id]}: probe results for unknown nodes {sorted(unknown)}")
    total = max(expected, len(members))
    return Verdict(ok=not reasons, nodes=total, reasons=tuple(reasons))


def render_table(members: Sequence[Member], missing: Sequence[str], endpoint: str) -> str:
    """The per-node table, sorted by node rank, then the nodes' warnings and failures."""
    names = labels(members)
    order = by_rank(members)
    header = ("node", "rank", "host", "address", "iface", "endpoint", "peers unreachable")
    rows: List[Tuple[str, ...]] = [header]
    for m in order:
        r = m.report
        if m.unreachable is None:
            peers = "? (no probe results)"
        else:
            peers = ", ".join(names.get(k, f"#{k}") for k in sorted(m.unreachable)) or "none"
        rows.append(
            (
                names[m.id],
                "-" if r.node_rank is None else str(r.node_rank),
                {True: "yes", False: "no", None: "?"}[r.is_host],
                r.address or "-",
                r.interface or "-",
                "reached",
                peers,
            )
        )
    rows += [(name, "-", "-", "-", "-", "NOT reached", "-") for name in missing]
    widths = [max(len(row[k]) for row in rows) for k in range(len(header))]
    lines = [f"preflight: endpoint {endpoint}, {len(members) + len(missing)} nodes"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for m in order:
        lines += [f"  {names[m.id]}: warning: {w}" for w in m.report.warnings]
        lines += [f"  {names[m.id]}: WILL FAIL: {f}" for f in m.report.failures]
        if m.problem is not None:
            lines.append(f"  {names[m.id]}: {m.problem}")
    return "\n".join(lines)


def describe_error(exc: BaseException) -> str:
    """``No route to host``, ``timed out``, ``Connection refused`` …"""
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def no_collector_reason(endpoint: str, timeout: float, last: Optional[BaseException]) -> str:
    """Why a node found no collector at the endpoint, from the last connection error."""
    text = describe_error(last) if last is not None else "no address to try"
    code = getattr(last, "errno", None)
    if code == errno.ECONNREFUSED:
        why = (
            "nothing listens there: no node considers itself host, or the host is not the node "
            "the endpoint names"
        )
    else:
        why = "the endpoint is unreachable from this node, or no node considers itself host"
    return f"no node accepted at {endpoint} within {timeout:g} s: {why} ({text})"


# --------------------------------------------------------------------------- sockets


class Channel:
    """Line-delimited JSON over a connected socket; every call has a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one JSON line; raises ``OSError`` (``socket.timeout`` past the deadline)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        self.sock.settimeout(_remaining(deadline))
        self.sock.sendall(data)

    def recv(self, deadline: float) -> Dict[str, Any]:
        """Receive one JSON object; raises ``OSError`` or ``ValueError``."""
        while b"\n" not in self._buf:
            self.sock.settimeout(_remaining(deadline))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ValueError("message too long")
        line, _, self._buf = self._buf.partition(b"\n")
        message = json.loads(line.decode())
        if not isinstance(message, dict):
            raise ValueError("message is not a JSON object")
        return message

    def close(self) -> None:
        """Close the socket (never raises)."""
        with contextlib.suppress(OSError):
            self.sock.close()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("timed out")
    return left


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


def endpoint_listener(port: int, ipv6: bool, address: Optional[str] = None) -> socket.socket:
    """A listening socket on ``port``: ``address``, else the wildcard (dual-stack if ``ipv6``)."""
    if address is not None:
        family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
        return socket.create_server((address, port), family=family, backlog=128)
    if ipv6 and socket.has_dualstack_ipv6():
        return socket.create_server(
            ("::", port), family=socket.AF_INET6, backlog=128, dualstack_ipv6=True
        )
    if ipv6:
        return socket.create_server(("::", port), family=socket.AF_INET6, backlog=128)
    return socket.create_server(("0.0.0.0", port), backlog=128)


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


@dataclass
class _Join:
    channel: Channel
    member: Member


@dataclass
class Collector:
    """Gathers the nodes' reports on the endpoint port and decides the verdict."""

    listener: socket.socket
    rdzv_id: str
    expected: int
    endpoint: str
    names_by_rank: Tuple[str, ...] = ()
    _joined: List[_Join] = field(default_factory=list)
    _open: bool = True
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _done: threading.Event = field(default_factory=threading.Event)

    def run(self, deadline: float, stop: threading.Event) -> Optional[Tuple[Verdict, str]]:
        """Collect until every expected node joined or ``deadline``; (verdict, table).

        Returns None, sooner, when ``stop`` is set before anybody joined.
        """
        accepter = threading.Thread(target=self._accept, daemon=True)
        accepter.start()
        try:
            with self._cond:
                while len(self._joined) < self.expected and time.monotonic() < deadline:
                    if stop.is_set() and not self._joined:
                        return None
                    self._cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                self._open = False
                joined = list(self._joined)
            if not joined:
                return None
            return self._finish(joined)
        finally:
            self._done.set()
            with contextlib.suppress(OSError):
                self.listener.close()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._done.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._welcome, args=(Channel(conn),), daemon=True).start()

    def _welcome(self, channel: Channel) -> None:
        deadline = time.monotonic() + HELLO_TIMEOUT
        try:
            hello = channel.recv(deadline)
            if hello.get("type") != "hello" or hello.get("proto") != PROTOCOL:
                raise ValueError(f"not a {PROTOCOL} hello")
            report = NodeReport.from_json(hello.get("report"))
        except (OSError, ValueError):
            channel.close()
            return
        refusal: Optional[str] = None
        if hello.get("rdzv_id") != self.rdzv_id:
            refusal = (
                f"the collector at {self.endpoint} serves rdzv_id {self.rdzv_id!r}, "
                f"not {hello.get('rdzv_id')!r}"
            )
        with self._cond:
            if refusal is None and not self._open:
                refusal = (
                    f"joined after the collector at {self.endpoint} stopped waiting "
                    f"(it expected {self.expected} nodes)"
                )
            if refusal is None:
                # Answer under the lock: "joined" must precede the collector's "peers".
                member = Member(id=len(self._joined), report=report)
                answer = {"type": "joined", "id": member.id, "expected": self.expected}
                with contextlib.suppress(OSError):  # then "peers" fails too and names it
                    channel.send(answer, min(deadline, time.monotonic() + 1.0))
                self._joined.append(_Join(channel, member))
                self._cond.notify_all()
                return
        with contextlib.suppress(OSError):
            channel.send({"type": "reject", "message": refusal}, deadline)
        channel.close()

    def _finish(self, joined: List[_Join]) -> Tuple[Verdict, str]:
        peers = [
            {
                "id": j.member.id,
                "address": j.member.report.address,
                "port": j.member.report.probe_port,
                "hostname": j.member.report.hostname,
            }
            for j in joined
        ]
        send_by = time.monotonic() + SEND_GRACE
        for j in joined:
            try:
                j.channel.send({"type": "peers", "you": j.member.id, "peers": peers}, send_by)
            except OSError as exc:
                j.member = replace(j.member, problem=f"lost before probing ({describe_error(exc)})")
        results_by = time.monotonic() + RESULTS_GRACE
        for j in joined:
            if j.member.problem is not None:
                continue
            try:
                j.member = replace(j.member, unreachable=_read_probes(j.channel, results_by))
            except (OSError, ValueError) as exc:
                j.member = replace(
                    j.member, problem=f"sent no probe results ({describe_error(exc)})"
                )
        members = [j.member for j in joined]
        missing = missing_names([m.report for m in members], self.expected, self.names_by_rank)
        verdict = compute_verdict(members, self.expected, missing, self.endpoint)
        table = render_table(members, missing, self.endpoint)
        send_by = time.monotonic() + SEND_GRACE
        for j in joined:
            with contextlib.suppress(OSError):
                j.channel.send({"type": "verdict", "ok": verdict.ok, "line": verdict.line}, send_by)
            j.channel.close()
        return verdict, table


def _read_probes(channel: Channel, deadline: float) -> Dict[int, str]:
    message = channel.recv(deadline)
    raw = message.get("unreachable")
    if message.get("type") != "probes" or not isinstance(raw, dict):
        raise ValueError("not a probes message")
    return {int(k): str(v) for k, v in raw.items()}


# --------------------------------------------------------------------------- one node


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


def run_node(config: NodeConfig, out: TextIO) -> int:
    """This node's whole preflight; prints to ``out``; 0 when the job-wide verdict is OK."""
    started = time.monotonic()
    deadline = started + config.timeout
    report = config.report
    stop = threading.Event()
    if report.address is not None:
        try:
            listener = probe_listener(report.address)
        except OSError as exc:
            report = replace(
                report,
                failures=(
                    *report.failures,
                    f"cannot listen on its advertised address {report.address} "
                    f"({describe_error(exc)})",
                ),
            )
        else:
            report = replace(report, probe_port=int(listener.getsockname()[1]))
            threading.Thread(target=_serve_and_close, args=(listener, stop), daemon=True).start()
    collected: List[Optional[Tuple[Verdict, str]]] = []
    collector_thread: Optional[threading.Thread] = None
    host_problem: Optional[str] = None
    if report.is_host:
        ipv6 = any(network.family_of(a) == 6 for a in config.endpoint_addresses)
        try:
            server = endpoint_listener(config.port, ipv6, config.listen_address)
        except OSError as exc:
            host_problem = (
                f"{report.hostname} considers itself host but cannot listen on port "
                f"{config.port} ({describe_error(exc)})"
            )
        else:
            collector = Collector(
                server, config.rdzv_id, config.expected, config.endpoint, config.names_by_rank
            )
            collector_thread = threading.Thread(
                target=lambda: collected.append(collector.run(deadline, stop)), daemon=True
            )
            collector_thread.start()
    client = run_client(replace(config, report=report), deadline)
    stop.set()
    if collector_thread is not None:
        collector_thread.join(config.timeout + RESULTS_GRACE + 2 * SEND_GRACE)
        if collected and collected[0] is None:
            host_problem = (
                f"{report.hostname} considers itself host, but its listener on port "
                f"{config.port} got no connection: the endpoint {config.endpoint} "
                f"({', '.join(config.endpoint_addresses)}) is not this node"
            )
    result = collected[0] if collected else None
    return _print_outcome(config, report, client, result, host_problem, started, out)


def _print_outcome(
    config: NodeConfig,
    report: NodeReport,
    client: ClientOutcome,
    result: Optional[Tuple[Verdict, str]],
    host_problem: Optional[str],
    started: float,
    out: TextIO,
) -> int:
    name = report.hostname or "this node"
    ok = True
    lines: List[str] = []
    if result is not None:
        verdict, table = result
        lines += [table, verdict.line]
        ok = verdict.ok
    else:
        unreachable = ", ".join(
            client.peer_names.get(k, f"#{k}") for k in sorted(client.unreachable)
        )
        summary = (
            f"preflight on {name}: node rank "
            f"{'-' if report.node_rank is None else report.node_rank}, is_host "
            f"{ {True: 1, False: 0, None: '?'}[report.is_host] }, address "
            f"{report.address or '-'} ({report.interface or '-'}), endpoint {config.endpoint} "
            f"{'reached' if client.reached else 'NOT reached'}, peers unreachable: "
            f"{(unreachable or 'none') if client.probed else 'not probed'} "
            f"({time.monotonic() - started:.1f} s)"
        )
        lines.append(summary)
        if client.line is not None:
            lines.append(f"job verdict: {client.line}")
            ok = client.ok is True
        elif client.problem is None:
            client.problem = "no verdict arrived"
    problems = [p for p in (host_problem, client.problem) if p is not None]
    if problems:
        ok = False
        lines.append("preflight: FAIL: " + "; ".join(f"{name}: {p}" for p in problems))
    out.write("\n".join(lines) + "\n")
    out.flush()
    return 0 if ok else 1


# --------------------------------------------------------------------------- entry point


def _names_by_rank(env: Mapping[str, str], prepared: Prepared) -> Tuple[str, ...]:
    if prepared.settings.node_rank_source != "SLURM_NODEID":
        return ()
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        text = (env.get(name) or "").strip()
        if text:
            from .slurm import expand_hostlist

            try:
                return tuple(expand_hostlist(text))
            except ValueError:
                return ()
    return ()


def node_config(prepared: Prepared, argv: Sequence[str], env: Mapping[str, str]) -> NodeConfig:
    """This node's :class:`NodeConfig`; raises ``LookupError`` (with the reason) when the
    command line has no multi-node c10d rendezvous to check.

    Reads the command line torchrun would get (``prepared.plan.argv``: with Slurm
    auto-configuration filled in), not only what the user typed (``argv``).
    """
    args = launch_args.parse(list(prepared.plan.argv) or list(argv), env)
    if args is None:
        raise LookupError("torchrun does not accept this command line")
    if args.standalone or args.rdzv_backend != "c10d" or not args.rdzv_endpoint:
        raise LookupError("no c10d rendezvous endpoint (--standalone, another backend, or none)")
    facts, plan, settings = prepared.facts, prepared.plan, prepared.settings
    host, port = network.split_endpoint(args.rdzv_endpoint)
    if network.is_loopback_host(host) or facts.endpoint_host is None:
        raise LookupError(f"the endpoint {args.rdzv_endpoint} is this machine's loopback")
    warnings = list(plan.warnings)
    if plan.is_host is None:
        warnings.append("is_host is left to torch's guess; the preflight counts it as not host")
    report = NodeReport(
        hostname=facts.hostname,
        node_rank=settings.node_rank,
        is_host=plan.is_host,
        address=plan.advertised_address,
        interface=plan.interface,
        warnings=tuple(warnings),
        failures=tuple(plan.predicted_failures),
    )
    return NodeConfig(
        report=report,
        endpoint=args.rdzv_endpoint,
        endpoint_addresses=facts.endpoint_addresses,
        port=DEFAULT_PORT if port is None else port,
        rdzv_id=args.rdzv_id,
        expected=expected_nodes(args.nnodes, env),
        timeout=settings.preflight_timeout,
        names_by_rank=_names_by_rank(env, prepared),
    )


def run_preflight(prepared: Prepared, argv: List[str], env: Mapping[str, str]) -> int:
    """Check the whole job instead of launching; 0 when every node is fine, else 1."""
    try:
        config = node_config(prepared, argv, env)
    except LookupError as exc:
        print(f"preflight: OK: nothing to check across nodes: {exc}", flush=True)
        return 0
    return run_node(config, sys.stdout)
