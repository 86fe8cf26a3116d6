"""The job watch's protocol in the rendezvous store: every key it uses and how values are
encoded, behind verbs (beat, mark done, tell stop, write and read records, ...). Nothing else
names a key or knows an encoding.

Keys (under :class:`~torchrun_jsc.runtime.store.connection.JobStore`'s prefix
``torchrun_jsc/<run id>/``; a ``<member>`` is a rendezvous participant as :func:`member_key`
spells it):

| key | value |
|---|---|
| ``hb/<member>`` | the member's heartbeat counter (below); the watcher creates it as 0 |
| ``who/<member>`` | ``{"hostname": ..., "node_rank": ..., "address": ...}`` (names; next host) |
| ``stop`` | the record of what stopped the job, written once (the first cause wins) |
| ``fail/n`` | how many record slots are taken |
| ``fail/<i>`` | one node's record (JSON, :class:`~torchrun_jsc.runtime.records.report.Record`) |
| ``fail/read`` | how many nodes have read the records |
| ``fail/settled`` | set once the serving node has added every record it will |
| ``connected`` | 0; the operation that makes the connection at the first round |
| ``host`` | the rendezvous host's member key, written before it joins its first round |
| ``round`` | the latest round: ``{"round": ..., "members": [...]}`` (written by the watcher) |
| ``first_round`` | torch's number of the job's first round (restarts count from it) |
| ``restart`` | the job's restart count of the latest round (written by the watcher) |
| ``round/<n>/spares`` | the spares (JSON keys) when torch's round ``n`` formed (first writer) |
| ``spare/n`` | how many spare slots are taken |
| ``spare/<i>`` | one spare's member key (its heartbeat counter is ``hb/<member>``) |
| ``spare/left/<member>`` | set once that spare ended with the job (the host waits for them) |
| ``ended`` | ``completed`` once a node ends after the whole job completed |
| ``requeue/verdict`` | whether the job is requeued after the warning signal (below) |
| ``requeue/ready`` | how many members' workers have ended after the warning signal |
| ``requeue/outcome`` | what the requeue came to (below), written by the node that requeued |
| ``requeue/told`` | how many nodes have read the outcome |

The requeue's two values are ``{"ok": ..., "line": ...}``: for the verdict, whether the job is
requeued (``line`` says why not); for the outcome, whether Slurm requeued it and the line every
node prints.

A heartbeat counter counts up by 1 per beat. Adding :data:`_DONE_BASE` marks the member's
workers done (it may then go quiet); overwriting it with :data:`_STOP_BASE` tells the member to
stop. An add keeps a stop written before (the sum stays at or above :data:`_STOP_BASE`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple

from ..records.report import Record, collect

#: A counter at or above this value tells its member that the job stops.
_STOP_BASE = 1 << 40
#: A counter at or above this (and below :data:`_STOP_BASE`): that member's workers are done.
_DONE_BASE = 1 << 39


class Store(Protocol):
    """The store connection the watch needs (:class:`JobStore`, or a fake in tests)."""

    #: monotonic time of the last operation that completed.
    last_ok: float

    def in_flight(self, now: Optional[float] = None) -> float: ...
    def add(self, name: str, amount: int) -> int: ...
    def set(self, name: str, value: str) -> None: ...
    def first(self, name: str, value: str) -> str: ...
    def peek(self, name: str) -> Optional[str]: ...
    def get_many(self, names: Sequence[str]) -> Dict[str, str]: ...


class Beat(NamedTuple):
    """One member's heartbeat counter, decoded."""

    beats: int
    done: bool = False
    stop: bool = False


def decode(value: int) -> Beat:
    """A counter value as a :class:`Beat`."""
    if value >= _STOP_BASE:
        return Beat(value - _STOP_BASE, stop=True)
    if value >= _DONE_BASE:
        return Beat(value - _DONE_BASE, done=True)
    return Beat(value)


def member_key(node: Any) -> str:
    """A rendezvous participant as a store key (torch's own identity of the node)."""
    address = getattr(node, "addr", None) or getattr(node, "fqdn", "?")
    return f"{address}_{node.pid}_{node.local_id}"


def _beat_key(member: str) -> str:
    return f"hb/{member}"


class Who(NamedTuple):
    """What a member told the others about itself."""

    hostname: str
    node_rank: Optional[int]
    #: The address the member advertises (reachable from every node), when it said.
    address: Optional[str] = None


class JobProtocol:
    """The verbs of the job watch over one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def connect(self) -> None:
        """Make the store connection now (else its first operation makes it)."""
        self.store.add("connected", 0)

    # ------------------------------------------------------------------ heartbeats

    def beat(self, member: str) -> Beat:
        """One heartbeat of ``member``; its counter now (``stop``: it is told to stop)."""
        return decode(self.store.add(_beat_key(member), 1))

    def watch(self, members: Sequence[str]) -> None:
        """Make sure every member's counter exists (a missing key would block a read)."""
        for member in members:
            self.store.first(_beat_key(member), "0")

    def beats(self, members: Sequence[str]) -> Dict[str, Optional[Beat]]:
        """Every member's counter (None for one that is not a number)."""
        values = self.store.get_many([_beat_key(m) for m in members])
        found: Dict[str, Optional[Beat]] = {}
        for member in members:
            text = values.get(_beat_key(member), "").strip()
            found[member] = decode(int(text)) if text.isdigit() else None
        return found

    def mark_done(self, member: str) -> Beat:
        """Mark ``member``'s workers done; its counter now (a stop written before stays)."""
        return decode(self.store.add(_beat_key(member), _DONE_BASE))

    def tell_stop(self, cause: Record, members: Sequence[str]) -> None:
        """Record what stops the job (unless a cause is recorded already) and tell ``members``
        at their next heartbeat."""
        self.store.first("stop", cause.to_json())
        for member in members:
            self.store.set(_beat_key(member), str(_STOP_BASE))

    def stop_cause(self) -> Optional[Record]:
        """What stopped the job, if anything did."""
        return Record.from_json(self.store.peek("stop") or "")

    def stopped(self) -> bool:
        """Whether anything stopped the job."""
        return bool(self.store.peek("stop"))

    # ------------------------------------------------------------------ who is who

    def introduce(
        self, member: str, hostname: str, node_rank: Optional[int], address: Optional[str] = None
    ) -> None:
        """Tell the others who ``member`` is and where it can be reached (once; the first
        word stays)."""
        info = {"hostname": hostname, "node_rank": node_rank, "address": address}
        self.store.first(f"who/{member}", json.dumps(info))

    def who(self, member: str) -> Optional[Who]:
        """What ``member`` said about itself, or None."""
        with contextlib.suppress(Exception):  # unknown: the member is named by its key
            data = json.loads(self.store.peek(f"who/{member}") or "")
            if isinstance(data, dict) and isinstance(data.get("hostname"), str):
                rank, address = data.get("node_rank"), data.get("address")
                return Who(
                    data["hostname"],
                    rank if isinstance(rank, int) else None,
                    address if isinstance(address, str) and address else None,
                )
        return None

    # ------------------------------------------------------------------ records

    def write_record(self, record: Record, slot: Optional[int] = None) -> int:
        """Write ``record`` into its slot (a new one when None); returns the slot."""
        if slot is None:
            slot = self.store.add("fail/n", 1)
        self.store.set(f"fail/{slot}", record.to_json())
        return slot

    def record_count(self) -> int:
        """How many record slots are taken."""
        return self.store.add("fail/n", 0)

    def records(self, count: int) -> List[Record]:
        """The records of the first ``count`` slots (which must exist)."""
        texts = self.store.get_many([f"fail/{n}" for n in range(1, count + 1)])
        return collect(list(texts.values()))

    def mark_settled(self) -> None:
        """The serving node has added every record it will (members that vanished)."""
        self.store.set("fail/settled", "1")

    def settled(self) -> bool:
        """Whether the serving node has added every record it will."""
        return self.store.peek("fail/settled") is not None

    def mark_read(self) -> None:
        """Count this node among those that have read the records."""
        self.store.add("fail/read", 1)

    def readers(self) -> int:
        """How many nodes have read the records."""
        return self.store.add("fail/read", 0)

    # ------------------------------------------------------------------ rounds and spares

    def note_host(self, member: str) -> None:
        """The rendezvous host's member key (the others keep a place for it in each round)."""
        self.store.set("host", member)

    def host(self) -> Optional[str]:
        """The rendezvous host's member key, once it said it."""
        return self.store.peek("host")

    def publish_round(self, number: int, members: Sequence[str]) -> None:
        """The round that formed (its torch number and members), for nodes not in it."""
        self.store.set("round", json.dumps({"round": number, "members": list(members)}))

    def latest_round(self) -> Optional[Tuple[int, Tuple[str, ...]]]:
        """The latest published round (number, members), or None."""
        with contextlib.suppress(Exception):
            data = json.loads(self.store.peek("round") or "")
            members = data["members"]
            if isinstance(data["round"], int) and all(isinstance(m, str) for m in members):
                return data["round"], tuple(members)
        return None

    def note_restart(self, restart: int) -> None:
        """The job's restart count of the latest round (written by the watcher)."""
        self.store.set("restart", str(restart))

    def restart(self) -> int:
        """The job's restart count of the latest round (0 when none was noted)."""
        text = self.store.peek("restart") or ""
        return int(text) if text.strip().isdigit() else 0

    def first_round(self, number: int) -> int:
        """The job's first round number (``number`` if none was noted before)."""
        text = self.store.first("first_round", str(number))
        return int(text) if text.strip().isdigit() else number

    def round_spares(self, number: int, members: Sequence[str]) -> Tuple[str, ...]:
        """The spares the job had when round ``number`` (of ``members``) formed: the
        registered spares not in the round, as the first node to ask found them (every node
        reads the same ones, :mod:`~torchrun_jsc.runtime.watch.quorum`)."""
        key = f"round/{number}/spares"
        text = self.store.peek(key)
        if text is None:
            found = [s for s in self.spares() if s not in members]
            text = self.store.first(key, json.dumps(found))
        with contextlib.suppress(ValueError):
            data = json.loads(text)
            if isinstance(data, list) and all(isinstance(s, str) for s in data):
                return tuple(data)
        return ()

    def add_spare(self, member: str) -> None:
        """Register ``member`` as a spare (its heartbeat counter must exist already)."""
        slot = self.store.add("spare/n", 1)
        self.store.set(f"spare/{slot}", member)

    def spares(self, after: int = 0) -> List[str]:
        """The member keys registered as spares after the first ``after``, in order (a reader
        that keeps what it read asks only for the new ones). Stops at a slot whose writer is
        between its two operations: that one is read next time."""
        count = self.store.add("spare/n", 0)
        found: List[str] = []
        for slot in range(after + 1, count + 1):
            key = self.store.peek(f"spare/{slot}")
            if not key:
                break
            found.append(key)
        return found

    def note_spare_left(self, member: str) -> None:
        """Note that spare ``member`` ended with the job."""
        self.store.set(f"spare/left/{member}", "1")

    def spares_left(self, members: Sequence[str]) -> List[str]:
        """Those of spares ``members`` that ended with the job."""
        return [m for m in members if self.store.peek(f"spare/left/{m}") is not None]

    def mark_completed(self) -> None:
        """Note that the whole job completed (for the spares)."""
        self.store.first("ended", "completed")

    def completed(self) -> bool:
        """Whether a node noted that the whole job completed."""
        return self.store.peek("ended") == "completed"

    # ------------------------------------------------------------------ requeue

    def set_requeue_verdict(self, ok: bool, line: str) -> Tuple[bool, str]:
        """Say whether the job is requeued (the first word stays); the verdict now."""
        found = _said(self.store.first("requeue/verdict", _say(ok, line)))
        return found if found is not None else (ok, line)

    def requeue_verdict(self) -> Optional[Tuple[bool, str]]:
        """Whether the job is requeued, and why not, once the serving node said it."""
        return _said(self.store.peek("requeue/verdict") or "")

    def requeue_ready(self) -> int:
        """Count this member as ready for the requeue; how many are."""
        return self.store.add("requeue/ready", 1)

    def requeue_readies(self) -> int:
        """How many members are ready for the requeue."""
        return self.store.add("requeue/ready", 0)

    def set_requeue_outcome(self, ok: bool, line: str) -> None:
        """What the requeue came to."""
        self.store.set("requeue/outcome", _say(ok, line))

    def requeue_outcome(self) -> Optional[Tuple[bool, str]]:
        """What the requeue came to, once the node that requeued wrote it."""
        return _said(self.store.peek("requeue/outcome") or "")

    def requeue_told(self, amount: int = 1) -> int:
        """Count this node among those that have read the outcome (0: only look); how many
        have."""
        return self.store.add("requeue/told", amount)


def _say(ok: bool, line: str) -> str:
    return json.dumps({"ok": ok, "line": line})


def _said(text: str) -> Optional[Tuple[bool, str]]:
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("line"), str):
            return bool(data.get("ok")), data["line"]
    return None
