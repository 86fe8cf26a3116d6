"""One line of the event log: the documented events, and their encoding as one JSON object per
line. Pure.

Every line has ``time`` (ISO 8601, UTC, milliseconds), ``event`` (one of :data:`EVENTS`),
``job`` (the Slurm job id, ``""`` outside Slurm), ``run`` (the job's requeue count,
``SLURM_RESTART_COUNT``), ``node`` (the writer's Slurm name) and the event's own fields.
Nodes are named ``{"name": ..., "node_rank": ...}`` (``node_rank`` null when not known).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

#: The events' names.
LAUNCH = "launch"
ROUND = "round"
LOST = "lost"
RESTART = "restart"
HANDOVER = "handover"
JOIN = "join"
STOP = "stop"
REQUEUE = "requeue"
SIGNAL = "signal"
END = "end"

#: The events, each with what it means and its own fields (docs/events.md renders this table).
EVENTS: Mapping[str, Tuple[str, str]] = MappingProxyType(
    {
        LAUNCH: (
            "the rendezvous host's agent started (each run, and again after a handover)",
            "`torch`, `torchrun_jsc` (versions), `nodes` (the allocation's node count),"
            " `nnodes` (`--nnodes`), `max_restarts`, `peer_timeout`, `recovery`, `failover`,"
            " `requeue`",
        ),
        ROUND: (
            "a rendezvous round formed (the first, and each after a restart)",
            "`restart` (the job's restart count; 0 for the first round), `members` (in node-rank"
            " order), `spares` (nodes waiting to take a lost node's place), `host` (the"
            " rendezvous host)",
        ),
        LOST: (
            "a node was declared lost",
            "`lost` (the node), `detection` (`heartbeat`), `quiet` (seconds without a sign of"
            " it), `last_seen` (ISO 8601), `next` (`restart` or `stop`)",
        ),
        RESTART: (
            "the job went on after a loss: the new round formed",
            "`restart`, `left`, `came` (nodes; `came` holds the spares that joined), `size`",
        ),
        JOIN: (
            "a spare took a lost node's place in the new round (after its `restart`)",
            "`spare` (the node that joined), `restart`",
        ),
        HANDOVER: (
            "the rendezvous host was lost and this node hosts the next round",
            "`lost` (what was lost), `restart`, `lost_nodes` (node ranks lost so far)",
        ),
        SIGNAL: (
            "SIGUSR1 or SIGUSR2 reached the agent",
            "`signal`, `passed_on` (false: its sender reached the workers itself), `workers`"
            " (how many it was passed on to)",
        ),
        STOP: (
            "the job is stopping (a lost node, another node's stop, a stop signal, also one"
            " before any worker started)",
            "`cause` (the launcher's line)",
        ),
        REQUEUE: (
            "the rendezvous host asked Slurm to requeue the job (`done`: whether Slurm did)",
            "`cause`, `excluded` (Slurm names), `done` (true when Slurm took it), `line`",
        ),
        END: (
            "the rendezvous host's agent ends",
            "`exit_code`, `outcome` (`succeeded`, `failed`, `handed over`)",
        ),
    }
)


class LogTarget(NamedTuple):
    """Where this job's events go and what every line says of the job: built by the plan
    (:mod:`torchrun_jsc.lifecycle`)."""

    path: str
    job: str = ""
    run: int = 0
    #: The allocation's node count (0: not known): a run's node-hours count from it.
    nodes: int = 0
    #: The launch event's own fields.
    launch: Tuple[Tuple[str, Any], ...] = ()


class Entry(NamedTuple):
    """One event as written: its wall-clock ``time`` (seconds since the epoch), ``event``
    (a key of :data:`EVENTS`), the ``job`` and its ``run`` (requeue count), the writing
    ``node`` and the event's own ``fields``."""

    time: float
    event: str
    job: str = ""
    run: int = 0
    node: str = ""
    fields: Mapping[str, Any] = MappingProxyType({})

    def get(self, name: str, default: Any = None) -> Any:
        """One of the event's own fields."""
        return self.fields.get(name, default)


#: The keys every line has (an event's own fields may not use them).
COMMON = ("time", "event", "job", "run", "node")


def iso(seconds: float) -> str:
    """``2026-12-05T10:21:07.123Z`` for wall-clock ``seconds``."""
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> Optional[float]:
    """Seconds since the epoch of an ISO 8601 time (``Z`` or an offset), None if it is not
    one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def node(name: str, node_rank: Optional[int]) -> Dict[str, Any]:
    """A node as events name it."""
    return {"name": name, "node_rank": node_rank}


def encode(entry: Entry) -> str:
    """The line for ``entry`` (no newline): the common keys first, then its own fields in
    name order."""
    head: Dict[str, Any] = {
        "time": iso(entry.time),
        "event": entry.event,
        "job": entry.job,
        "run": entry.run,
        "node": entry.node,
    }
    own = {k: entry.fields[k] for k in sorted(entry.fields) if k not in COMMON}
    return json.dumps({**head, **own}, separators=(",", ":"), default=str)


def decode(line: str) -> Optional[Entry]:
    """The entry of one line, or None for a line that is not one (truncated, corrupted, an
    unknown event, a bad time): never raises."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    stamp = data.get("time")
    event, when = data.get("event"), parse_time(stamp) if isinstance(stamp, str) else None
    job, run, name = data.get("job", ""), data.get("run", 0), data.get("node", "")
    if not isinstance(event, str) or event not in EVENTS:
        return None
    if when is None or not math.isfinite(when):
        return None
    if not isinstance(job, str) or not isinstance(name, str):
        return None
    if not isinstance(run, int) or isinstance(run, bool) or run < 0:
        return None
    own = MappingProxyType({k: v for k, v in data.items() if k not in COMMON})
    return Entry(when, event, job, run, name, own)


class Read(NamedTuple):
    """The entries of some lines, in time order, and how many lines were skipped."""

    entries: Tuple[Entry, ...]
    skipped: int


def read(lines: Sequence[str]) -> Read:
    """The entries of ``lines`` (blank lines ignored, others that are no entry counted),
    sorted by time (stable: lines of one time keep their order)."""
    entries: List[Entry] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        entry = decode(line)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    return Read(tuple(sorted(entries, key=lambda e: e.time)), skipped)


def markdown_table() -> str:
    """docs/events.md's table of events (between ``<!-- events:begin/end -->``), from
    :data:`EVENTS`."""
    lines = ["| event | when | its own fields |", "|---|---|---|"]
    lines += [f"| `{name}` | {when} | {fields} |" for name, (when, fields) in EVENTS.items()]
    return "\n".join(lines)
