"""The collector: runs on the node that considers itself host, on the endpoint's port; gathers
every node's report, hands each node the few peers it probes, decides the verdict.

One asyncio event loop, one coroutine per connection while it says hello, no thread: thousands
of nodes cost a few kilobytes each."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass, replace
from typing import Any, List, Optional, Set, Tuple

from .. import network
from .assign import assign_probes
from .report import (
    Member,
    NodeReport,
    Verdict,
    compute_verdict,
    describe_error,
    missing_names,
    render_table,
)
from .wire import MAX_LINE, PROTOCOL, Stream

#: How long the collector waits for a hello line.
HELLO_TIMEOUT = 5.0
#: How long the collector waits for probe results after sending the peers.
RESULTS_GRACE = 5.0
#: How long the collector may take to send one round of messages to every node.
SEND_GRACE = 3.0
#: A listen backlog when the kernel's limit cannot be read.
DEFAULT_BACKLOG_CAP = 4096


def listen_backlog(expected: int, somaxconn: Optional[int]) -> int:
    """A listen backlog for a job of ``expected`` nodes: at least 128 and the node count, at
    most what the kernel allows (``somaxconn``, ``net.core.somaxconn``, which caps it silently
    anyway; None: unknown)."""
    cap = DEFAULT_BACKLOG_CAP if somaxconn is None else somaxconn
    return max(1, min(max(128, expected), cap))


def endpoint_listener(
    port: int, ipv6: bool, address: Optional[str] = None, backlog: int = 128
) -> socket.socket:
    """A listening socket on ``port``: ``address``, else the wildcard (dual-stack if ``ipv6``)."""
    if address is not None:
        family = socket.AF_INET6 if network.family_of(address) == 6 else socket.AF_INET
        return socket.create_server((address, port), family=family, backlog=backlog)
    if ipv6 and socket.has_dualstack_ipv6():
        return socket.create_server(
            ("::", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
        )
    if ipv6:
        return socket.create_server(("::", port), family=socket.AF_INET6, backlog=backlog)
    return socket.create_server(("0.0.0.0", port), backlog=backlog)


@dataclass
class _Join:
    stream: Stream
    member: Member


class Collector:
    """Gathers the nodes' reports on the endpoint port and decides the verdict.

    :meth:`run` serves ``listener`` on the running event loop; :meth:`close` stops. Nodes that
    say hello after it stopped waiting are refused until :meth:`close`.
    """

    def __init__(
        self,
        listener: socket.socket,
        rdzv_id: str,
        expected: int,
        endpoint: str,
        names_by_rank: Tuple[str, ...] = (),
        backlog: int = 128,
    ) -> None:
        self.listener = listener
        self.rdzv_id = rdzv_id
        self.expected = expected
        self.endpoint = endpoint
        self.names_by_rank = names_by_rank
        self.backlog = backlog
        #: Connections accepted, and well-formed hellos among them (joined or refused).
        self.accepted = 0
        self.hellos = 0
        self._joined: List[_Join] = []
        self._open = True
        self._server: Optional[asyncio.AbstractServer] = None
        self._full: Optional[asyncio.Event] = None
        self._welcomes: Set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        """Start accepting (done by :meth:`run` when not yet done)."""
        if self._server is None:
            self._full = asyncio.Event()
            self._server = await asyncio.start_server(
                self._welcome, sock=self.listener, backlog=self.backlog, limit=MAX_LINE
            )

    async def run(self, deadline: float, stop: asyncio.Event) -> Optional[Tuple[Verdict, str]]:
        """Collect until every expected node joined or ``deadline``; (verdict, table).

        Returns None, sooner, when ``stop`` is set before anybody joined.
        """
        await self.start()
        assert self._full is not None
        while not self._full.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or (stop.is_set() and not self._joined):
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._full.wait(), min(0.1, left))
        self._open = False
        joined = list(self._joined)
        if not joined:
            return None
        try:
            return await self._finish(joined)
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening and hang up on every node (never raises)."""
        self._open = False
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(OSError):
            self.listener.close()
        for j in self._joined:
            j.stream.close()
        for task in list(self._welcomes):
            task.cancel()

    async def _welcome(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        stream = Stream(reader, writer)
        task = asyncio.current_task()
        if task is not None:
            self._welcomes.add(task)
        joined = False
        try:
            joined = await self._hello(stream)
        finally:
            if task is not None:
                self._welcomes.discard(task)
            if not joined:
                stream.close()

    async def _hello(self, stream: Stream) -> bool:
        """Read the hello, answer; True when the node joined (its stream is kept)."""
        deadline = time.monotonic() + HELLO_TIMEOUT
        try:
            hello = await stream.recv(deadline)
            if hello.get("type") != "hello" or hello.get("proto") != PROTOCOL:
                raise ValueError(f"not a {PROTOCOL} hello")
            report = NodeReport.from_json(hello.get("report"))
        except (OSError, ValueError):
            return False
        self.hellos += 1
        refusal: Optional[str] = None
        if hello.get("rdzv_id") != self.rdzv_id:
            refusal = (
                f"the collector at {self.endpoint} serves rdzv_id {self.rdzv_id!r}, "
                f"not {hello.get('rdzv_id')!r}"
            )
        elif not self._open or len(self._joined) >= self.expected:
            refusal = (
                f"joined after the collector at {self.endpoint} stopped waiting "
                f"(it expected {self.expected} nodes)"
            )
        if refusal is None:
            member = Member(id=len(self._joined), report=report)
            # Queued before "peers" can be: the collector writes those only after this join.
            stream.write({"type": "joined", "id": member.id, "expected": self.expected})
            self._joined.append(_Join(stream, member))
            if len(self._joined) >= self.expected and self._full is not None:
                self._full.set()
            with contextlib.suppress(OSError):  # then "peers" fails too and names it
                await stream.drain(min(deadline, time.monotonic() + 1.0))
            return True
        with contextlib.suppress(OSError):
            await stream.send({"type": "reject", "message": refusal}, deadline)
        return False

    async def _finish(self, joined: List[_Join]) -> Tuple[Verdict, str]:
        assignment = assign_probes([j.member for j in joined])
        by_id = {j.member.id: j.member for j in joined}
        for j in joined:
            targets = assignment[j.member.id]
            j.member = replace(j.member, targets=targets)
            peers = [
                {
                    "id": t,
                    "address": by_id[t].report.address,
                    "port": by_id[t].report.probe_port,
                    "hostname": by_id[t].report.hostname,
                }
                for t in targets
            ]
            j.stream.write({"type": "peers", "you": j.member.id, "peers": peers})
        send_by = time.monotonic() + SEND_GRACE
        await asyncio.gather(*(self._drain(j, send_by, "lost before probing") for j in joined))
        results_by = time.monotonic() + RESULTS_GRACE
        await asyncio.gather(*(self._results(j, results_by) for j in joined))
        members = [j.member for j in joined]
        missing = missing_names([m.report for m in members], self.expected, self.names_by_rank)
        verdict = compute_verdict(members, self.expected, missing, self.endpoint)
        table = render_table(members, missing, self.endpoint, self.expected)
        final = {"type": "verdict", "ok": verdict.ok, "line": verdict.line}
        for j in joined:
            with contextlib.suppress(Exception):
                j.stream.write(final)
        send_by = time.monotonic() + SEND_GRACE
        await asyncio.gather(*(self._drain(j, send_by, None) for j in joined))
        return verdict, table

    @staticmethod
    async def _drain(j: _Join, deadline: float, problem: Optional[str]) -> None:
        try:
            await j.stream.drain(deadline)
        except (OSError, RuntimeError) as exc:
            if problem is not None and j.member.problem is None:
                j.member = replace(j.member, problem=f"{problem} ({describe_error(exc)})")

    @staticmethod
    async def _results(j: _Join, deadline: float) -> None:
        if j.member.problem is not None:
            return
        try:
            message = await j.stream.recv(deadline)
            raw = message.get("unreachable")
            if message.get("type") != "probes" or not isinstance(raw, dict):
                raise ValueError("not a probes message")
            unreachable = {int(k): str(v) for k, v in raw.items()}
        except (OSError, ValueError) as exc:
            j.member = replace(j.member, problem=f"sent no probe results ({describe_error(exc)})")
        else:
            j.member = replace(j.member, unreachable=unreachable)
