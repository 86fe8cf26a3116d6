"""The collector: runs on the node that considers itself host, on the endpoint's port; gathers
every node's report, hands out the peers to probe, decides the verdict."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

from .. import network
from .report import (
    Member,
    NodeReport,
    Verdict,
    compute_verdict,
    describe_error,
    missing_names,
    render_table,
)
from .wire import PROTOCOL, Channel

#: How long the collector waits for a hello line.
HELLO_TIMEOUT = 5.0
#: How long the collector waits for probe results after sending the peers.
RESULTS_GRACE = 5.0
#: How long the collector may take to send one round of messages to every node.
SEND_GRACE = 3.0


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
