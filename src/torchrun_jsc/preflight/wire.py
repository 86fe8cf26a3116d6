"""The preflight's wire format: one JSON object per line, a deadline on every operation."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any, Dict, Mapping

PROTOCOL = "torchrun_jsc-preflight/1"
MAX_LINE = 1 << 20


class Channel:
    """Line-delimited JSON over a connected socket; every call has a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, message: Mapping[str, Any], deadline: float) -> None:
        """Send one JSON line; raises ``OSError`` (``socket.timeout`` past the deadline)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        self.sock.settimeout(remaining(deadline))
        self.sock.sendall(data)

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
        message = json.loads(line.decode())
        if not isinstance(message, dict):
            raise ValueError("message is not a JSON object")
        return message

    def close(self) -> None:
        """Close the socket (never raises)."""
        with contextlib.suppress(OSError):
            self.sock.close()


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("timed out")
    return left
