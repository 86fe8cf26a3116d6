"""The ``backoff`` patch with torch's real rendezvous on this machine's loopback: many handlers
of one c10d rendezvous join at once, every one gets its rank, and every write of the state
that lost was followed by one wait."""

from __future__ import annotations

import datetime
import threading
from typing import Any, Dict, Iterator, List

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import backoff, params

pytestmark = pytest.mark.integration

dist = pytest.importorskip("torch.distributed")

#: Nodes joining at once: enough that some writes lose on two cores (a round of 16 has none).
NODES = 64


@pytest.fixture(autouse=True)
def undo() -> Iterator[None]:
    yield
    patches.restore_all()


class Lost:
    """A store whose ``compare_set`` calls are counted, and those that lost."""

    def __init__(self, store: Any) -> None:
        self.store, self.lost, self.lock = store, 0, threading.Lock()

    def compare_set(self, key: str, expected: Any, desired: Any) -> Any:
        found = self.store.compare_set(key, expected, desired)
        wanted = desired.encode() if isinstance(desired, str) else desired
        if found != wanted:
            with self.lock:
                self.lost += 1
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def one_round(port: int, run_id: str) -> Dict[str, Any]:
    """``NODES`` handlers join ``run_id`` at once; their ranks, lost writes and waits."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import (
        C10dRendezvousBackend,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    wait = datetime.timedelta(seconds=120)
    ranks: List[int] = []
    counted: List[Lost] = []
    handlers: List[Any] = []
    go = threading.Barrier(NODES)
    lock = threading.Lock()

    def node() -> None:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=wait)
        lost = Lost(store)
        handler = DynamicRendezvousHandler.from_backend(
            run_id,
            store,
            C10dRendezvousBackend(lost, run_id),  # type: ignore[arg-type]
            min_nodes=NODES,
            max_nodes=NODES,
            local_addr="127.0.0.1",
            timeout=RendezvousTimeout(join=wait, close=wait),
        )
        with lock:
            counted.append(lost)
            handlers.append(handler)
        go.wait()
        info: Any = handler.next_rendezvous()
        with lock:
            ranks.append(info.rank if hasattr(info, "rank") else info[1])

    threads = [threading.Thread(target=node, daemon=True) for _ in range(NODES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    for handler in handlers:
        handler._stop_heartbeats()  # the keep-alives after the round (5 s on), not counted
    waits = sum(getattr(h._state_holder, backoff.WAITS, 0) for h in handlers)
    return {"ranks": sorted(ranks), "lost": sum(c.lost for c in counted), "waits": waits}


def test_every_node_joins_and_every_lost_write_waits_once() -> None:
    assert patches.install(params.Backoff(first=0.05, cap=2.5)) is None
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    rounds = []
    for attempt in range(3):  # losses depend on timing; a round without any proves nothing
        found = one_round(server.port, f"backoff{attempt}")
        rounds.append(found)
        assert found["ranks"] == list(range(NODES))
        assert found["waits"] == found["lost"]
        if found["lost"]:
            break
    assert any(r["lost"] for r in rounds), rounds
