"""The preflight's wire layer without a network: deadlines (``within``) and reading lines.

A ``StreamReader`` is fed by hand; nothing here opens a socket."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Awaitable, Dict, TypeVar

import pytest

from torchrun_jsc.preflight.wire import MAX_LINE, Stream, decode, encode, within

T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def test_within_returns_in_time() -> None:
    async def quick() -> int:
        await asyncio.sleep(0.01)
        return 7

    assert run(within(quick(), time.monotonic() + 5)) == 7


def test_within_times_out_as_an_oserror() -> None:
    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(socket.timeout) as info:
            await within(asyncio.sleep(5), started + 0.05)
        assert isinstance(info.value, OSError)
        # the task is usable afterwards: no cancellation left pending on it
        await asyncio.sleep(0.01)
        return time.monotonic() - started

    assert 0.05 <= run(main()) < 1


def test_within_past_deadline_does_not_start() -> None:
    started: Dict[str, bool] = {}

    async def never() -> None:
        started["yes"] = True

    with pytest.raises(socket.timeout):
        run(within(never(), time.monotonic() - 1))
    assert not started


def test_within_passes_on_other_cancellation() -> None:
    async def main() -> None:
        inner = asyncio.ensure_future(within(asyncio.sleep(5), time.monotonic() + 5))
        await asyncio.sleep(0.01)
        inner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inner

    run(main())


def test_within_outside_a_task() -> None:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        loop.call_later(0.01, fut.set_result, 3)
        return await within(fut, time.monotonic() + 5)

    assert run(main()) == 3


class NoWriter:
    def close(self) -> None:
        pass


def fed(data: bytes, eof: bool = True) -> Stream:
    reader = asyncio.StreamReader(limit=MAX_LINE)
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return Stream(reader, NoWriter())  # type: ignore[arg-type]


def test_recv_lines() -> None:
    async def main() -> None:
        stream = fed(encode({"type": "hello"}) + encode({"n": 1}) + b'{"partial":')
        deadline = time.monotonic() + 5
        assert await stream.recv(deadline) == {"type": "hello"}
        assert await stream.recv(deadline) == {"n": 1}
        with pytest.raises(ConnectionError):
            await stream.recv(deadline)

    run(main())


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"[1, 2]\n", "not a JSON object"),
        (b"GET / HTTP/1.0\r\n", "Expecting value"),
        (b"\xff\xfe\n", "codec"),
        (b"x" * (MAX_LINE + 10) + b"\n", "message too long"),
    ],
)
def test_recv_rejects(data: bytes, error: str) -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match=error):
            await fed(data).recv(time.monotonic() + 5)

    run(main())


def test_recv_times_out() -> None:
    async def main() -> None:
        with pytest.raises(socket.timeout):
            await fed(b'{"no": "newline"}', eof=False).recv(time.monotonic() + 0.05)

    run(main())


def test_encode_decode_round_trip() -> None:
    message = {"type": "probes", "unreachable": {"3": "timed out"}}
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line.rstrip(b"\n")) == message
