"""The agent-side job watch of one torchrun_jsc agent: heartbeats, lost nodes, stopping the
job, failure records and the last line about the job's first failure.

The ``peer_watch`` and ``failure_report`` patches configure :data:`SESSION` and hook torch's
agent in two places (both stable in torch 1.13-2.15):

* after ``SimpleElasticAgent._rendezvous``: the round's members (the rendezvous state's
  participants, identified as torch identifies them) and this node's key; the first time, the
  heartbeat and watchdog threads start;
* around ``LocalElasticAgent._monitor_workers``: a final failure (no restarts left) is
  published; a stop asked for by another thread is answered with a FAILED result, the way torch
  itself ends a run from the monitor.

Heartbeats: every agent adds 1 to its counter in the rendezvous store every few seconds (its own
store connection). The agent that serves the store watches all counters (:class:`Tracker`). A
member quiet for the peer timeout is lost: the watcher records it and overwrites every other
member's counter with a stop value, so each of them learns it at its next heartbeat and stops its
workers; where torch can go on without the node (``--nnodes=MIN:MAX`` with restarts left), the
watcher restarts its own workers instead and torch re-forms the job without it. A node whose
heartbeat operation hangs or fails for the peer timeout has lost the rendezvous host and stops.

A node whose workers had all finished when the job fails elsewhere (another node's worker
failed, a node was lost, the rendezvous host hangs) would wait in torch's exit barrier for the
barrier's timeout (300 s; torch 2.1+ sends failed nodes past it). It prints the first failure
instead and ends with 0, the code torch gives it once the barrier times out.

Stopping never waits for torch's main thread (it may be blocked in a store operation that never
returns): this module stops the workers itself (SIGTERM, the grace, SIGKILL) and, if the agent
has not ended a few seconds later, prints the last line and ends the process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from . import heartbeats, workers
from .heartbeats import STOP_BASE, Tracker
from .jobstore import JobStore
from .report import FAILED, LOST, STOPPED, Record, collect, error_file_message, report_line

#: A heartbeat counter at or above this (and below STOP_BASE): that node's workers are done.
DONE_BASE = 1 << 39
#: How long the node serving the store waits, at a failure, for the others to read the records.
LINGER = 10.0
#: How long a node waits for the other nodes' records before it prints the first failure, on
#: top of the time they may take to notice (torch's monitor interval, the heartbeat interval).
SETTLE = 3.0
#: How long, after stopping its workers, the agent may take to end by itself.
EXIT_GRACE = 10.0
#: The longest any store operation of the stopping and exit paths may take.
STORE_WAIT = 5.0
#: How long the process's end waits for the job watch's threads to leave their store call.
QUIESCE_WAIT = 2.0
#: At the end, a store operation of this agent's running longer than this is taken as hanging
#: (the host is gone): the last line is then made from this node's own records.
HANG = 2.0
#: How long a failure report waits for a worker's exit to be noted (its watch thread may not
#: have run since, on a loaded node): the order of a node's failures rests on it.
EXIT_NOTE_WAIT = 2.0
#: Default grace between SIGTERM and SIGKILL (torch's own).
TORCH_GRACE = 30.0
#: The operation timeout of torchrun_jsc's own store connection when peers are not watched.
STORE_TIMEOUT = 30.0


class Node(NamedTuple):
    """What the plan knows about this node (``store_host`` None: no rendezvous store to use,
    e.g. ``--standalone``: the failure report then covers this node only)."""

    hostname: str
    node_rank: Optional[int] = None
    is_host: Optional[bool] = None
    endpoint: str = ""
    store_host: Optional[str] = None
    store_port: int = 0
    run_id: str = ""
    elastic: bool = False
    grace: Optional[float] = None


class Session:
    """The job watch of this agent process (one per process: :data:`SESSION`)."""

    def __init__(
        self,
        node: Optional[Node] = None,
        peer_timeout: float = 0.0,
        report: bool = False,
        request: Optional[str] = None,
    ) -> None:
        self.node = node
        self.peer_timeout = peer_timeout
        self.report = report
        self.store: Optional[JobStore] = None
        self.agent: Any = None
        self.me = ""
        self.members: List[str] = []
        #: Members this (watching) node declared lost: they will not read the records.
        self.lost: List[str] = []
        self.group_rank: Optional[int] = None
        self.tracker: Optional[Tracker] = None
        #: "stop" or "restart" once asked; the monitor hook answers it.
        self.request = request
        self.records: List[Record] = []
        self.done = False
        self.stopping = False
        #: The job failed (here, or elsewhere after this node's workers had finished): the
        #: last line names its first failure.
        self.failed = False
        self.printed = False
        #: Set once the thread that prints the last line is done with it.
        self.reported = threading.Event()
        #: Set when the process's normal end (``at_exit``) has begun.
        self.exiting = False
        self.threads_started = False
        #: Set when the agent process ends: the job watch's threads stop their store traffic.
        self.closing = threading.Event()
        self.threads: List[threading.Thread] = []
        #: torch's monitor interval (seconds between two looks at the workers; 5 s before 2.4).
        self.monitor_interval = 0.0
        self.lock = threading.RLock()
        #: The store slot (``fail/<n>``) of this node's own record, once written.
        self.own_slot: Optional[int] = None
        self.own_lock = threading.Lock()

    # ------------------------------------------------------------------ configuration

    def configure(self, node: Node, peer_timeout: float = 0.0, report: bool = False) -> None:
        """Called by the patches (each adds its part)."""
        with self.lock:
            if self.node is None:
                self.node = node
            self.peer_timeout = max(self.peer_timeout, peer_timeout)
            self.report = self.report or report
            if self.store is None and node.store_host:
                timeout = peer_timeout or STORE_TIMEOUT
                self.store = JobStore(node.store_host, node.store_port, node.run_id, timeout)
        atexit.unregister(self.at_exit)
        atexit.register(self.at_exit)

    @property
    def watching(self) -> bool:
        """Whether this agent serves the store (and so watches everyone's heartbeats)."""
        node = self.node
        if node is None:
            return False
        if node.is_host is not None:
            return node.is_host
        return self.group_rank == 0

    # ------------------------------------------------------------------ torch hooks

    def after_rendezvous(self, agent: Any, worker_group: Any) -> None:
        """The round's members and this node's key; starts the threads the first time."""
        if self.node is None:
            return
        with self.lock:
            self.agent = agent
            self.group_rank = worker_group.group_rank
        if self.store is None:
            return
        handler = worker_group.spec.rdzv_handler
        holder = getattr(handler, "_state_holder", None)
        this = getattr(handler, "_this_node", None)
        if holder is None or this is None:
            _say("job watch off: this rendezvous handler does not expose its participants")
            self.peer_timeout = 0.0
            return
        with self.lock:
            self.agent = agent
            self.me = _key(this)
            self.members = sorted(_key(n) for n in holder.state.participants)
            self.group_rank = worker_group.group_rank
            start = not self.threads_started
            self.threads_started = True
        if self.peer_timeout > 0 and start:
            # Connect here, in torch's main thread, before the watch threads start, so that the
            # client is not made while torch starts the workers. A precaution: a rare torch
            # 1.13 agent crash during the workers' start (CHANGELOG, known problems) was seen
            # both before and after this; its cause is not known.
            with contextlib.suppress(Exception):
                self.store.connect()
            for target, name in (
                (self._beat_loop, "trjsc-beat"),
                (self._watchdog, "trjsc-watchdog"),
            ):
                thread = threading.Thread(target=target, daemon=True, name=name)
                self.threads.append(thread)
                thread.start()

    def around_monitor(self, agent: Any, worker_group: Any, original: Any) -> Any:
        """``_monitor_workers``: answer a stop or restart; publish a final failure."""
        from torch.distributed.elastic.agent.server.api import WorkerState

        with self.lock:
            self.agent = agent
            asked, self.request = self.request, None
            self.monitor_interval = float(getattr(worker_group.spec, "monitor_interval", 0) or 0)
        if asked == "stop":
            agent._remaining_restarts = 0
            # This node's own workers may have failed before the stop arrived (a peer's death
            # breaks their collectives): that failure is this node's record, not a stop.
            result = original(agent, worker_group)
            if result.state == WorkerState.FAILED:
                self._final_failure(worker_group, result)
                return result
            if result.state == WorkerState.SUCCEEDED:
                # Every worker had ended well before the stop (torch's monitor had not looked
                # yet): this node succeeded, and ends with 0.
                with self.lock:
                    self.done = True
                return result
            return _stopped_result(worker_group)
        if asked is not None:
            return _stopped_result(worker_group)
        result = original(agent, worker_group)
        if result.state == WorkerState.FAILED and agent._remaining_restarts == 0:
            self._final_failure(worker_group, result)
        elif result.state == WorkerState.SUCCEEDED:
            self._finished()
        return result

    # ------------------------------------------------------------------ heartbeats

    def _beat_loop(self) -> None:
        assert self.store is not None
        interval = heartbeats.interval_for(self.peer_timeout)
        self.tracker = Tracker(self.peer_timeout)
        known: List[str] = []
        self.register()
        while not self.closing.is_set():
            try:
                value = self.store.add(f"hb/{self.me}", 1)
                if self.watching:
                    members = list(self.members)
                    if members != known:
                        for key in members:
                            self.store.first(f"hb/{key}", "0")
                        self.tracker.members(members, time.monotonic())
                        known = members
                    self._scan(known)
            except Exception:  # a store that went away: the watchdog decides
                self.closing.wait(interval)
                continue
            if heartbeats.is_stop_signal(value) and not (self.stopping or self.closing.is_set()):
                self._told_to_stop()
            self.closing.wait(interval)

    def _scan(self, members: List[str]) -> None:
        assert self.store is not None and self.tracker is not None
        values = self.store.get_many([f"hb/{k}" for k in members])
        now = time.monotonic()
        readings: Dict[str, Optional[int]] = {}
        for key in members:
            text = values.get(f"hb/{key}", "")
            number = int(text) if text.strip().isdigit() else None
            readings[key] = number
            if number is not None and DONE_BASE <= number < STOP_BASE:
                self.tracker.finished(key)
        lost = [k for k in self.tracker.observe(readings, now) if k != self.me]
        if lost and not self.stopping:
            self._lost(lost, now)

    def _lost(self, lost: List[str], now: float) -> None:
        assert self.store is not None and self.tracker is not None and self.node is not None
        key = lost[0]
        quiet = self.tracker.quiet_for(key, now)
        who = self._who(key)
        record = Record(
            kind=LOST,
            hostname=who.get("hostname") or key,
            node_rank=who.get("node_rank"),
            time=time.time() - quiet,
        )
        others = "" if len(lost) == 1 else f" (and {len(lost) - 1} more)"
        line = (
            f"torchrun_jsc: {record.hostname if record.node_rank is None else _name(record)}"
            f" has not been heard from for {quiet:.0f} s (TORCHRUN_JSC_PEER_TIMEOUT="
            f"{self.peer_timeout:g}){others}"
        )
        agent = self.agent
        restarts = agent is not None and agent._remaining_restarts > 0
        if self.node.elastic and restarts and not self.done:
            _say(f"{line[len('torchrun_jsc: ') :]}; restarting the workers without it")
            self.tracker.members([k for k in self.members if k not in lost], now)
            with self.lock:
                self.request = "restart"
            return
        with self.lock:
            self.lost = list(lost)
        self._publish(record)
        self._stop_everyone(record)
        self._end_job(line, "stopping the job")

    def _who(self, key: str) -> Dict[str, Any]:
        assert self.store is not None
        import json

        with contextlib.suppress(Exception):
            text = self.store.peek(f"who/{key}")
            if text:
                data = json.loads(text)
                if isinstance(data, dict):
                    return data
        return {}

    def register(self) -> None:
        """Tell the others who this node is (for their messages)."""
        import json

        if self.store is None or self.node is None or not self.me:
            return
        info = {"hostname": self.node.hostname, "node_rank": self.node.node_rank}
        with contextlib.suppress(Exception):
            self.store.first(f"who/{self.me}", json.dumps(info))

    def _stop_everyone(self, record: Record) -> None:
        store = self.store
        assert store is not None
        members = [k for k in self.members if k != self.me]

        def tell() -> None:
            store.first("stop", record.to_json())
            for key in members:
                store.set(f"hb/{key}", str(STOP_BASE))

        bounded(tell, STORE_WAIT)

    def _told_to_stop(self) -> None:
        store = self.store
        assert store is not None
        cause = Record.from_json(bounded(lambda: store.peek("stop"), STORE_WAIT) or "")
        why = _describe_cause(cause)
        self._end_job(f"torchrun_jsc: {why}", "stopping this node's workers")

    def _watchdog(self) -> None:
        assert self.store is not None and self.node is not None
        timeout = self.peer_timeout
        while not self.closing.wait(1.0):
            now = time.monotonic()
            stuck = self.store.in_flight(now)
            silent = now - self.store.last_ok
            if self.stopping or not heartbeats.host_lost(stuck, silent, timeout, self.done):
                continue
            node = self.node
            record = Record(
                kind=LOST,
                hostname=node.hostname,
                node_rank=node.node_rank,
                time=time.time() - silent,
                what=f"the rendezvous host {node.endpoint}",
            )
            self.records.append(record)
            line = (
                f"torchrun_jsc: the rendezvous host {node.endpoint} has not answered for"
                f" {silent:.0f} s (TORCHRUN_JSC_PEER_TIMEOUT={timeout:g})"
            )
            self._end_job(line, "stopping this node's workers")
            return

    # ------------------------------------------------------------------ stopping

    def _end_job(self, line: str, action: str) -> None:
        """The job ends (``line`` says why): stop this node's workers (``action`` says so), or,
        when they had all finished, leave torch's exit barrier."""
        if self.done:
            self._leave(line)
        else:
            self._stop_node(f"{line}; {action}")

    def _stop_node(self, line: str) -> None:
        with self.lock:
            if self.stopping:
                return
            self.stopping = True
            self.failed = True
            self.request = "stop"
            agent = self.agent
        if agent is not None:
            agent._remaining_restarts = 0
        _say_line(line)
        threading.Thread(target=self._end_workers, daemon=True, name="trjsc-stop").start()

    def _leave(self, line: str) -> None:
        """The job failed after this node's workers had all finished: say why, print the first
        failure and end the agent with 0 instead of waiting in torch's exit barrier."""
        with self.lock:
            if self.stopping or self.exiting:
                return
            self.stopping = True
            self.failed = True
        _say_line(
            f"{line}; this node's workers had finished: ending now, not waiting in torch's exit"
            " barrier"
        )
        threading.Thread(target=self._end_finished, daemon=True, name="trjsc-leave").start()

    def _end_finished(self) -> None:
        self._print_report()
        if not self.exiting:  # torch's main thread is still in its exit barrier
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os._exit(0)

    def _end_workers(self) -> None:
        self._stop_workers()
        time.sleep(EXIT_GRACE)
        # Print the last line if nobody has (the agent did not end by itself: a blocked store
        # operation), or let the thread that is printing it finish.
        self._print_report()
        if not self.exiting:
            os._exit(0 if self.done else 1)

    def _stop_workers(self) -> None:
        """Stop this node's workers and publish that (a STOPPED record) unless they had all
        ended by themselves: torch's monitor then publishes their failure."""
        node = self.node
        grace = TORCH_GRACE if node is None or node.grace is None else node.grace
        count = workers.stop_all(grace)
        if count and self.node is not None:
            self._publish_own(
                Record(
                    kind=STOPPED,
                    hostname=self.node.hostname,
                    node_rank=self.node.node_rank,
                    time=time.time(),
                    ranks_ended=count,
                )
            )

    # ------------------------------------------------------------------ failures

    def _final_failure(self, worker_group: Any, result: Any) -> None:
        record = self._failure_record(worker_group, result)
        with self.lock:
            self.failed = True
        if self._publish_own(record) and self.peer_timeout > 0 and record.kind == FAILED:
            self._stop_everyone(record)

    def _failure_record(self, worker_group: Any, result: Any) -> Record:
        node = self.node
        assert node is not None
        failures = dict(result.failures or {})
        mine = {g: f for g, f in failures.items() if not workers.stopped_by_us(f.pid)}
        ended = len(getattr(worker_group, "workers", ()) or ()) or len(failures)
        if not mine:
            return Record(
                kind=STOPPED,
                hostname=node.hostname,
                node_rank=node.node_rank,
                time=time.time(),
                ranks_ended=ended,
            )

        ended_at = workers.exit_times([f.pid for f in mine.values()], EXIT_NOTE_WAIT)
        now = time.time()

        def when(item: Any) -> float:
            # torch's own timestamp is whole seconds: the exit came before the next one (and
            # before now), never at its truncated start, which would put it ahead of exits
            # noted to the millisecond.
            failure = item[1]
            if failure.pid in ended_at:
                return ended_at[failure.pid]
            stamp = getattr(failure, "timestamp", None)
            return now if stamp is None else min(now, float(stamp) + 1)

        rank, failure = min(mine.items(), key=when)
        data = getattr(failure, "error_file_data", None)
        wrote = bool(failure.error_file) and os.path.isfile(failure.error_file)
        message = error_file_message(data) if wrote and isinstance(data, dict) else ""
        oom = failure.exitcode == -9 and workers.oom_since_start()
        return Record(
            kind=FAILED,
            hostname=node.hostname,
            node_rank=node.node_rank,
            time=when((rank, failure)),
            rank=int(rank),
            local_rank=failure.local_rank,
            exitcode=failure.exitcode,
            message=message,
            oom=oom,
            ranks_ended=ended,
        )

    def _publish(self, record: Record, local_only: bool = False) -> None:
        with self.lock:
            self.records.append(record)
        store = self.store
        if local_only or store is None or not self.report:
            return

        bounded(lambda: _write_record(store, record), STORE_WAIT)

    def _publish_own(self, record: Record) -> bool:
        """Publish how this node's workers ended: one record per node, whichever of the stopping
        thread and torch's monitor comes first, except that a failure of its own replaces a
        stop (both see the same ended workers; two records would count them twice). Returns
        whether ``record`` became this node's record."""
        with self.lock:
            index = next(
                (i for i, r in enumerate(self.records) if r.kind in (FAILED, STOPPED)), None
            )
            if index is None:
                self.records.append(record)
            elif record.kind == FAILED and self.records[index].kind == STOPPED:
                self.records[index] = record
            else:
                return False
        store = self.store
        if store is None or not self.report:
            return True

        def write() -> None:
            with self.own_lock:  # the latest of this node's record, in its one slot
                with self.lock:
                    latest = next(r for r in self.records if r.kind in (FAILED, STOPPED))
                self.own_slot = _write_record(store, latest, self.own_slot)

        bounded(write, STORE_WAIT)
        return True

    def _finished(self) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
        store = self.store
        if store is None or not self.me or self.peer_timeout <= 0:
            return
        # An add, not a set: a stop value written before stays one (and is seen here).
        value = bounded(lambda: store.add(f"hb/{self.me}", DONE_BASE), STORE_WAIT)
        if isinstance(value, int) and heartbeats.is_stop_signal(value):
            threading.Thread(target=self._told_to_stop, daemon=True, name="trjsc-stop").start()

    # ------------------------------------------------------------------ the last line

    def at_exit(self) -> None:
        """Print the job's first failure as this agent's last line (once), when it failed; then
        stop the job watch's threads before the interpreter ends (a thread inside a store call
        while the process tears down torch's objects can abort it)."""
        self.exiting = True
        try:
            self._learn_job_end()
            self._print_report()
        finally:
            self._quiesce()

    def _learn_job_end(self) -> None:
        """A node whose workers finished may pass torch's exit barrier before its heartbeat
        learns that another node's worker failed (torch < 2.1 sends failed nodes into the
        barrier too): one look at the stop key, so that its last line names the failure."""
        store = self.store
        if not self.done or self.failed or not self.report:
            return
        if store is None or self.peer_timeout <= 0 or not self.me:
            return
        if bounded(lambda: store.peek("stop"), HANG):
            self.failed = True

    def _quiesce(self) -> None:
        self.closing.set()
        deadline = time.monotonic() + QUIESCE_WAIT
        for thread in [*self.threads, *_store_calls()]:
            if thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0.0))

    def _report_wait(self) -> float:
        """The longest the last line may take (reading every node's record)."""
        return self._settle() + LINGER + STORE_WAIT

    def _print_report(self) -> None:
        """Print the last line, once; a second caller waits until the first has printed it
        (neither the stopping thread nor the process's end may cut it off)."""
        with self.lock:
            if self.printed:
                mine = False
            elif not self.failed or not self.report:
                return
            else:
                self.printed = mine = True
        if not mine:
            self.reported.wait(self._report_wait() + 1.0)
            return
        try:
            records = list(self.records)
            found = bounded(self._read_records, self._report_wait())
            if found:
                records = found
            line = report_line(records)
            if line is not None:
                _say_line(line)
        finally:
            self.reported.set()

    def _settle(self) -> float:
        """How long to wait for the other nodes' records."""
        beat = heartbeats.interval_for(self.peer_timeout) if self.peer_timeout > 0 else 0.0
        return SETTLE + max(self.monitor_interval, beat)

    def _read_records(self) -> List[Record]:
        """Every node's record from the store, waiting a little for the slower ones; the node
        serving the store waits for the others to have read them."""
        store = self.store
        if store is None or store.in_flight() > HANG:
            return []  # a hanging operation: the host is gone
        wanted = max(len(self.members), 1)
        deadline = time.monotonic() + self._settle()
        count = store.add("fail/n", 0)
        while count < wanted and time.monotonic() < deadline:
            time.sleep(0.2)
            count = store.add("fail/n", 0)
        texts = store.get_many([f"fail/{n}" for n in range(1, count + 1)])
        store.add("fail/read", 1)
        if self.watching:  # a lost node reads nothing: not waited for
            readers = max(wanted - len(set(self.lost) & set(self.members)), 1)
            linger = time.monotonic() + LINGER
            while store.add("fail/read", 0) < readers and time.monotonic() < linger:
                time.sleep(0.2)
        return collect(list(texts.values()))


def _write_record(store: JobStore, record: Record, slot: Optional[int] = None) -> int:
    """Write ``record`` into the store slot ``fail/<slot>`` (a new slot when None); the slot."""
    if slot is None:
        slot = store.add("fail/n", 1)
    store.set(f"fail/{slot}", record.to_json())
    return slot


def _key(node: Any) -> str:
    """A rendezvous participant as a store key (torch's own identity of the node)."""
    address = getattr(node, "addr", None) or getattr(node, "fqdn", "?")
    return f"{address}_{node.pid}_{node.local_id}"


def _name(record: Record) -> str:
    from .report import node_name

    return node_name(record.hostname, record.node_rank)


def _describe_cause(cause: Optional[Record]) -> str:
    if cause is None:
        return "another node stopped the job"
    from .report import describe

    return describe(cause)


def _stopped_result(worker_group: Any) -> Any:
    """A FAILED run result naming this node's first worker as stopped by SIGTERM (torch needs a
    failure to report; torchrun_jsc's own line names the real cause)."""
    import signal

    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    failures = {}
    for worker in list(getattr(worker_group, "workers", []))[:1]:
        failures[worker.global_rank] = ProcessFailure(
            local_rank=worker.local_rank,
            pid=worker.id or 0,
            exitcode=-int(signal.SIGTERM),
            error_file="",
        )
    return RunResult(state=WorkerState.FAILED, failures=failures)


_calls: List[threading.Thread] = []
_calls_lock = threading.Lock()


def bounded(call: Callable[[], Any], seconds: float) -> Any:
    """``call()`` in a daemon thread, waiting at most ``seconds``; None if it did not return
    (a store operation on a lost host never does) or raised."""
    box: List[Any] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            box.append(call())

    worker = threading.Thread(target=run, daemon=True, name="trjsc-store")
    with _calls_lock:
        _calls[:] = [t for t in _calls if t.is_alive()]
        _calls.append(worker)
    worker.start()
    worker.join(seconds)
    return box[0] if box else None


def _store_calls() -> List[threading.Thread]:
    """The threads of :func:`bounded` still running (the process's end waits for them)."""
    with _calls_lock:
        return [t for t in _calls if t.is_alive()]


def _say(text: str) -> None:
    _say_line(f"torchrun_jsc: {text}")


def _say_line(line: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


#: This agent process's job watch.
SESSION = Session()


def reset() -> None:
    """A fresh session (``restore_all``, tests)."""
    global SESSION
    atexit.unregister(SESSION.at_exit)
    SESSION = Session()
