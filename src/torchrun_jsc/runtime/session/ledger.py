"""This node's account of the job's failures: the records it knows (kept here and, with the
failure report on, written to the store), and the last line made from every node's records."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import timing
from ..processes.output import say
from ..records.report import FAILED, LOST, STOPPED, Record, report_line
from ..store.bounded import bounded
from ..store.protocol import JobProtocol
from ..watch import heartbeats


class Ledger:
    """The records of this node: LOST records it declared, and its own one (how its workers
    ended) in one store slot."""

    def __init__(self, report: bool, protocol: Optional[JobProtocol] = None) -> None:
        self.report = report
        self.protocol = protocol
        self.records: List[Record] = []
        #: Store keys of members that will not read the records (declared lost here).
        self.unread: List[str] = []
        self._lock = threading.Lock()
        self._slot_lock = threading.Lock()
        self._slot: Optional[int] = None

    def publish(self, record: Record, local: bool = False, unread: Sequence[str] = ()) -> None:
        """Keep ``record``; write it to the store unless ``local`` (or the report is off)."""
        with self._lock:
            self.records.append(record)
            self.unread.extend(unread)
        protocol = self.protocol
        if local or protocol is None or not self.report:
            return
        bounded(lambda: protocol.write_record(record), timing.STORE_WAIT)

    def own(self) -> Optional[Record]:
        """This node's own record, if it has one."""
        with self._lock:
            return next((r for r in self.records if r.kind in (FAILED, STOPPED)), None)

    def publish_own(self, record: Record) -> bool:
        """Publish how this node's workers ended: one record per node, whichever of the stopping
        thread and torch's monitor comes first, except that a failure of its own replaces a
        stop (both see the same ended workers; two records would count them twice). Returns
        whether ``record`` became this node's record."""
        with self._lock:
            index = next(
                (i for i, r in enumerate(self.records) if r.kind in (FAILED, STOPPED)), None
            )
            if index is None:
                self.records.append(record)
            elif record.kind == FAILED and self.records[index].kind == STOPPED:
                self.records[index] = record
            else:
                return False
        protocol = self.protocol
        if protocol is None or not self.report:
            return True

        def write() -> None:
            with self._slot_lock:  # the latest of this node's record, in its one slot
                latest = self.own()
                if latest is not None:
                    self._slot = protocol.write_record(latest, self._slot)

        bounded(write, timing.STORE_WAIT)
        return True

    def read_all(
        self,
        members: Sequence[str],
        serving: bool,
        settle: float,
        quiet: Optional[Callable[[], Mapping[str, float]]] = None,
        beat: float = 0.0,
    ) -> List[Record]:
        """Every node's record from the store, waiting up to ``settle`` for ``members`` of
        them; the node ``serving`` the store then waits for the others to have read them.
        Empty when an operation of this node's hangs (the host is gone).

        The serving node also names the members that vanished (``quiet``: the members'
        seconds of quiet, heartbeats every ``beat`` seconds): a member without a record,
        quiet for :data:`~..timing.VANISHED_BEATS` heartbeats, gets a LOST record; then it
        notes that it is done, which the others wait for (a bound: the heartbeats more)."""
        protocol = self.protocol
        if protocol is None or protocol.store.in_flight() > timing.HANG:
            return []
        wanted = max(len(members), 1)
        deadline = time.monotonic() + settle
        if serving:
            count = self._name_the_vanished(protocol, members, deadline, quiet, beat)
        else:
            count = self._wait_for_records(protocol, wanted, deadline, beat)
        records = protocol.records(count)
        protocol.mark_read()
        if serving:  # a lost node reads nothing: not waited for
            readers = max(wanted - len(set(self.unread) & set(members)), 1)
            linger = time.monotonic() + timing.LINGER
            while protocol.readers() < readers and time.monotonic() < linger:
                time.sleep(0.2)
        return records

    def _wait_for_records(
        self, protocol: JobProtocol, wanted: int, deadline: float, beat: float
    ) -> int:
        """Until ``wanted`` records are in, or the deadline has passed and the serving node
        has added its own; at most the heartbeats it may wait more. The record count."""
        latest = deadline + timing.VANISHED_BEATS * beat
        count = protocol.record_count()
        while count < wanted and time.monotonic() < latest:
            if time.monotonic() >= deadline and (beat <= 0 or protocol.settled()):
                # counted again: the serving node's last records may have come since the
                # count above, just before it said it had added them all
                return protocol.record_count()
            time.sleep(0.2)
            count = protocol.record_count()
        return count

    def _name_the_vanished(
        self,
        protocol: JobProtocol,
        members: Sequence[str],
        deadline: float,
        quiet: Optional[Callable[[], Mapping[str, float]]],
        beat: float,
    ) -> int:
        """The serving node's wait: until every member has a record, or the deadline has
        passed and nobody may still turn out to have vanished; members that vanished get a
        LOST record meanwhile. The record count."""
        latest = deadline + (timing.VANISHED_BEATS * beat if quiet is not None else 0.0)
        wanted, named = max(len(members), 1), set()
        names: Dict[str, Tuple[str, Optional[int]]] = {}
        seen, have = -1, set()
        while True:
            count = protocol.record_count()
            now = time.monotonic()
            if count >= wanted or now >= latest:
                break
            unsure: List[str] = []
            found = dict(quiet()) if quiet is not None else {}
            if found:
                if count != seen:
                    seen, have = count, {(r.hostname, r.node_rank) for r in protocol.records(count)}
                for key in found:
                    if key in members and key not in names:
                        who = protocol.who(key)
                        names[key] = (who.hostname, who.node_rank) if who else (key, None)
                missing = {
                    k: q
                    for k, q in found.items()
                    if k in members and k not in named and names[k] not in have
                }
                gone, unsure = heartbeats.sort_out(missing, beat)
                for key in gone:
                    hostname, node_rank = names[key]
                    # last heard from at the scan that saw its last beat: it may have gone
                    # silent up to a heartbeat before that
                    when = time.time() - missing[key]
                    lost = Record(LOST, hostname, node_rank, time=when, slack=beat)
                    self.publish(lost, unread=(key,))
                    named.add(key)
                if gone:
                    continue
            if now >= deadline and not unsure:
                break
            time.sleep(0.2)
        bounded(protocol.mark_settled, timing.STORE_WAIT)
        return count


class LastLine:
    """The line every agent ends with when the job failed, printed once: a second caller
    waits until the first has printed it (neither the stopping thread nor the process's end
    may cut it off)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._printed = False
        self._done = threading.Event()
        #: The records the line was made from, and this node's own kept ones (what it lost
        #: itself is not published: the requeue must know it all the same).
        self.seen: List[Record] = []

    def print(self, ledger: Ledger, read: Callable[[], List[Record]], wait: float) -> None:
        """Print the first failure from what ``read`` finds within ``wait`` seconds, else from
        this node's own records."""
        with self._lock:
            mine, self._printed = not self._printed, True
        if not mine:
            self._done.wait(wait + 1.0)
            return
        try:
            kept = list(ledger.records)
            found = bounded(read, wait)
            records = found or kept
            self.seen = [*records, *(r for r in kept if r not in records)]
            line = report_line(records)
            if line is not None:
                say(line)
        finally:
            self._done.set()
