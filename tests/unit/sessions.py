"""Sessions of the job watch on the fake store, and the records and lines their tests compare
(tests/unit/runtime/session/)."""

from __future__ import annotations

import calendar
from typing import Any, List

import pytest

from torchrun_jsc.runtime.processes.workers import Workers
from torchrun_jsc.runtime.records.report import Record
from torchrun_jsc.runtime.session.adapter import Session
from torchrun_jsc.runtime.store.protocol import JobProtocol
from torchrun_jsc.runtime.watch.vocabulary import Config

from .fakestore import FakeStore

NOON = calendar.timegm((2026, 11, 30, 12, 0, 0))


def rec(kind: str, host: str, t: float, **kw: Any) -> Record:
    """A record of ``kind`` by ``host``, ``t`` seconds after :data:`NOON`."""
    return Record(kind=kind, hostname=host, time=NOON + t, **kw)


def new_session(node_rank: int = 0, peer_timeout: float = 0.0, **config: Any) -> Session:
    """The session of node ``node_rank`` (hostname ``node<rank>``), the failure report on, with
    a worker registry of its own."""
    return Session(
        Config(
            hostname=f"node{node_rank}",
            node_rank=node_rank,
            peer_timeout=peer_timeout,
            report=True,
            **config,
        ),
        Workers(),
    )


def with_store(session: Session) -> FakeStore:
    """Connect ``session`` to a new fake store, and return the store."""
    store = FakeStore()
    session.protocol = JobProtocol(store)
    session.ledger.protocol = session.protocol
    return store


def err_lines(capsys: pytest.CaptureFixture[str]) -> List[str]:
    """The non-blank lines written to stderr so far."""
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
