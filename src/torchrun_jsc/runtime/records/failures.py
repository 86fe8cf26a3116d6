"""This node's account of how its workers ended, from torch's run result; and the result the
watch gives torch's monitor when it stops the workers itself."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Optional

from .. import timing
from ..processes.workers import Workers
from .report import FAILED, STOPPED, Record, error_file_message

#: Ranks of a node that ended with the same code within this many seconds of the first ended
#: the same way with it (one signal to all of them), not after it.
ALIKE = 1.0
#: How torch stops the other workers after a failure: a rank that died of these is never
#: counted as ending the same way.
TORCH_STOPS = (-int(signal.SIGTERM), -int(signal.SIGKILL))


def stopped(hostname: str, node_rank: Optional[int], count: int) -> Record:
    """``count`` of this node's workers were stopped by torchrun_jsc."""
    return Record(
        kind=STOPPED, hostname=hostname, node_rank=node_rank, time=time.time(), ranks_ended=count
    )


def from_result(
    workers: Workers, hostname: str, node_rank: Optional[int], worker_group: Any, result: Any
) -> Record:
    """The record of a FAILED run result: its first failing worker (by when it ended, as
    ``workers`` noted it), or a STOPPED record when torchrun_jsc had stopped every failed
    worker."""
    failures = dict(result.failures or {})
    mine = {g: f for g, f in failures.items() if not workers.stopped_by_us(f.pid)}
    ended = len(getattr(worker_group, "workers", ()) or ()) or len(failures)
    if not mine:
        return stopped(hostname, node_rank, ended)

    ended_at = workers.exit_times([f.pid for f in mine.values()], timing.EXIT_NOTE_WAIT)
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
    first = when((rank, failure))
    alike = sum(
        1
        for item in mine.items()
        if item[0] != rank
        and item[1].exitcode == failure.exitcode
        and failure.exitcode not in TORCH_STOPS
        and abs(when(item) - first) <= ALIKE
    )
    data = getattr(failure, "error_file_data", None)
    wrote = bool(failure.error_file) and os.path.isfile(failure.error_file)
    message = error_file_message(data) if wrote and isinstance(data, dict) else ""
    oom = failure.exitcode == -9 and workers.oom_since_start()
    return Record(
        kind=FAILED,
        hostname=hostname,
        node_rank=node_rank,
        time=first,
        rank=int(rank),
        local_rank=failure.local_rank,
        exitcode=failure.exitcode,
        message=message,
        oom=oom,
        ranks_ended=ended,
        alike=alike,
    )


def stopped_result(worker_group: Any) -> Any:
    """A FAILED run result naming this node's first worker as stopped by SIGTERM (torch needs a
    failure to report; torchrun_jsc's own line names the real cause)."""
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
