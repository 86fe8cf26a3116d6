"""What a node tells the others when its part of the job ends badly, and the one line every
agent prints about the job's first failure. Pure: records in, text out.

A :class:`Record` is one node's account: its first failing worker (rank, local rank, exit code,
the time the worker ended, torch's error-file message, whether the kernel's out-of-memory killer
was behind it), or a node that was lost, or a node whose workers torchrun_jsc stopped because of
another node. :func:`first_failure` picks the job's root among them: the earliest failure that
was not caused by torchrun_jsc stopping the job.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence

#: A worker failed (exit code or signal) on this node.
FAILED = "failed"
#: A node stopped responding (declared by the node that watches heartbeats, or by a node that
#: lost the rendezvous host).
LOST = "lost"
#: torchrun_jsc stopped this node's workers because another node failed or was lost.
STOPPED = "stopped"
#: How a LOST record that a node wrote of itself (it did not run: frozen, suspended) begins.
ITSELF = "this node, "


class Record(NamedTuple):
    """One node's account of how its part of the job ended (JSON in the rendezvous store)."""

    kind: str
    hostname: str
    node_rank: Optional[int] = None
    #: Wall-clock time (seconds since the epoch) the failure happened or the node was last seen.
    time: float = 0.0
    rank: Optional[int] = None
    local_rank: Optional[int] = None
    exitcode: Optional[int] = None
    #: torch's error-file message of a worker that used ``@record`` (first line), if any.
    message: str = ""
    oom: bool = False
    #: How many of this node's workers ended badly or were stopped.
    ranks_ended: int = 0
    #: For LOST: what was lost ("the rendezvous host node0i:29500", or empty for a node).
    what: str = ""
    #: For FAILED: how many other ranks of this node ended the same way with it (a signal that
    #: killed them all at once): not "stopped after it".
    alike: int = 0
    #: For LOST: the node may have gone silent up to this many seconds before ``time`` (the
    #: heartbeats were read that often); the first failure counts from the earliest.
    slack: float = 0.0

    def to_json(self) -> str:
        """The record as one JSON object."""
        return json.dumps(self._asdict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Optional[Record]:
        """A record, or None for anything that is not one (never raises)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("kind") not in (FAILED, LOST, STOPPED):
            return None
        known = {k: v for k, v in data.items() if k in cls._fields}
        try:
            return cls(**known)
        except TypeError:
            return None


def first_failure(records: Sequence[Record]) -> Optional[Record]:
    """The job's root failure: the earliest FAILED or LOST record (STOPPED ones only follow)."""
    roots = [r for r in records if r.kind in (FAILED, LOST)]
    if not roots:
        return None
    return min(
        roots, key=lambda r: (r.time - r.slack, r.kind != FAILED, r.node_rank or 0, r.hostname)
    )


def node_name(hostname: str, node_rank: Optional[int]) -> str:
    """``node2 (node rank 2)``."""
    return hostname if node_rank is None else f"{hostname} (node rank {node_rank})"


def how_it_ended(exitcode: Optional[int], oom: bool) -> str:
    """``exited with code 3``, ``was killed by SIGKILL``, ``was killed by the out-of-memory
    killer (SIGKILL)``."""
    if exitcode is None:
        return "ended"
    if exitcode >= 0:
        return f"exited with code {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    if oom:
        return f"was killed by the out-of-memory killer ({name})"
    return f"was killed by {name}"


def clock(when: float) -> str:
    """``12:03:04.512 UTC``."""
    stamp = time.strftime("%H:%M:%S", time.gmtime(when))
    return f"{stamp}.{int((when % 1) * 1000):03d} UTC"


def describe(record: Record) -> str:
    """The record as a sentence (no trailing period)."""
    where = node_name(record.hostname, record.node_rank)
    if record.kind == LOST:
        what = record.what or where
        return f"{what} stopped responding (last heard from at {clock(record.time)})"
    if record.kind == STOPPED:
        return f"{where}: torchrun_jsc stopped its workers at {clock(record.time)}"
    who = f"rank {record.rank}" if record.rank is not None else "a worker"
    if record.local_rank is not None:
        who += f" (local rank {record.local_rank})"
    text = f"{where}: {who} {how_it_ended(record.exitcode, record.oom)} at {clock(record.time)}"
    if record.alike:
        text += f", {record.alike} more rank{'s' if record.alike != 1 else ''} the same way"
    if record.message:
        text += f": {record.message}"
    return text


def report_line(records: Sequence[Record]) -> Optional[str]:
    """The line every agent prints last: the job's first failure and how many ranks stopped
    after it; None when nothing failed."""
    root = first_failure(records)
    if root is None:
        return None
    own = 1 + root.alike if root.kind == FAILED else 0
    followed = max(sum(r.ranks_ended for r in records) - own, 0)
    tail = f"; {followed} rank{'s' if followed != 1 else ''} stopped after it" if followed else ""
    return f"torchrun_jsc: first failure: {describe(root)}{tail}"


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def error_file_message(data: Mapping[str, Any]) -> str:
    """The message of torch's error file (``{"message": {"message": "...", ...}}`` as written
    by ``@record``), first line only; '' when it has none."""
    message = data.get("message")
    if isinstance(message, dict):
        message = message.get("message")
    return first_line(message) if isinstance(message, str) else ""


def collect(texts: Sequence[Optional[str]]) -> List[Record]:
    """Records from the stored JSON texts (missing or foreign ones skipped)."""
    found = [Record.from_json(t) for t in texts if t]
    return [r for r in found if r is not None]
