"""The preflight's wire format: one JSON object per line, a deadline on every operation.

:class:`Stream` is what the collector and the clients use (asyncio); :class:`Channel` is the
same over a blocking socket, for tools and tests that speak the protocol by hand."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from typing import Any, Awaitable, Dict, Mapping, TypeVar

PROTOCOL = "torchrun_jsc-preflight/1"
MAX_LINE = 1 << 20

T = TypeVar("T")


def encode(message: Mapping[str, Any]) -> bytes:
    """One JSON line."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> Dict[str, Any]:
    """One JSON object from a line; raises ``ValueError``."""
    message = json.loads(line.decode())
    if not isinstance(message, dict):
        raise ValueError("message is not a JSON object")
    return message


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("timed out")
    return left


async def within(awaitable: Awaitable[T], deadline: float) -> T:
    """Await ``awaitable`` until ``deadline``; past it raise ``socket.timeout`` (an
    ``OSError`` on every Python version, which ``asyncio.TimeoutError`` is not before 3.11).

    Like ``asyncio.timeout`` (3.11+): a timer cancels the waiting task, no task per call
    (``asyncio.wait_for`` makes one before 3.12; thousands of nodes make many calls)."""
    try:
        left = remaining(deadline)
    except OSError:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise
    task = asyncio.current_task()
    if task is None:  # not inside a task: nothing to cancel
        try:
            return await asyncio.wait_for(awaitable, left)
        except asyncio.TimeoutError:
            raise socket.timeout("timed out") from None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(left, expire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if not expired:
            raise
        uncancel = getattr(task, "uncancel", None)  # 3.11+: this cancellation is handled
        if uncancel is not None:
            uncancel()
        raise socket.timeout("timed out") from None
    finally:
        timer.cancel()


class Stream:
    """Line-delimited JSON over an asyncio stream pair; every wait has a deadline."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def write(self, message: Mapping[str, Any]) -> None:
        """Queue one JSON line (in order with every other write; never blocks)."""
        self.writer.write(encode(message))

    async def drain(self, deadline: float) -> None:
        """Wait until the queued lines are handed to the kernel; raises ``OSError``."""
        transport = self.writer.transport
        if transport.get_write_buffer_size() == 0 and not transport.is_closing():
            return  # all written already: the common case, no waiting to set up
        await within(self.writer.drain(), deadline)

    async def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one JSON line; raises ``OSError`` (``socket.timeout`` past the deadline)."""
        self.write(message)
        await self.drain(deadline)

    async def recv(self, deadline: float) -> Dict[str, Any]:
        """Receive one JSON object; raises ``OSError`` or ``ValueError``."""
        try:
            line = await within(self.reader.readline(), deadline)
        except ValueError:  # the stream's limit (MAX_LINE) overrun
            raise ValueError("message too long") from None
        if not line.endswith(b"\n"):
            raise ConnectionError("connection closed")
        return decode(line)

    def close(self) -> None:
        """Close the connection (never raises)."""
        with contextlib.suppress(Exception):
            self.writer.close()


class Channel:
    """Line-delimited JSON over a connected blocking socket; every call has a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one JSON line; raises ``OSError`` (``socket.timeout`` past the deadline)."""
        self.sock.settimeout(remaining(deadline))
        self.sock.sendall(encode(message))

    def recv(self, deadline: float) -> Dict[str, Any]:
        """Receive one JSON object; raises ``OSError`` or ``ValueError``."""
        while b"\n" not in self._buf:
            self.sock.settimeout(remaining(deadline))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                raise ValueError("message too long")
        line, _, self._buf = self._buf.partition(b"\n")
        return decode(line)

    def close(self) -> None:
        """Close the socket (never raises)."""
        with contextlib.suppress(OSError):
            self.sock.close()
