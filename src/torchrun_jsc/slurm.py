"""Slurm: hostlist expressions, the job step's environment, the rendezvous port and id.

Pure: callers pass the environment in (any mapping). :meth:`SlurmStep.from_env` reads every
variable it knows once; a bad value does not stop anything by itself but is kept as a problem of
the field it fills, raised (one line, :class:`~torchrun_jsc.errors.ConfigError`) only when a launch
needs that field (:meth:`SlurmStep.need`): an unrelated broken ``SLURM_*`` variable never stops a
launch that does not use it.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import (
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    Union,
)

from . import envvars
from .errors import ConfigError

#: Upper bound on the number of hosts (or task counts) one expression may expand to.
MAX_HOSTS = 100_000
#: First port :func:`rendezvous_port` may return.
PORT_BASE = 20_000
#: Ports :func:`rendezvous_port` chooses from: 20000-31999 lies above the well-known ports and
#: the common service ports, below Linux's default ephemeral range (32768-60999), and contains
#: torch's default 29500.
PORT_SPAN = 12_000

_MAX_DIGITS = 18  # longest number accepted anywhere; keeps int() cheap and inside 64 bits
HOSTLIST_ACCEPTS = (
    "comma-separated host names, each optionally with bracketed lists of numbers and "
    "ranges, e.g. 'node[001-004,010]' or 'rack[1-2]-node[01-02]'"
)
_TASKS_ACCEPTS = "comma-separated counts, each optionally repeated as 'N(xM)', e.g. '2(x3),1'"
_RANGE_RE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TASKS_RE = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_DIGITS_RE = re.compile(r"[0-9]+")
_NOT_A_STEP = frozenset(
    {
        "batch",
        "extern",
        "interactive",
        "pending",
        "4294967290",  # SLURM_INTERACTIVE_STEP
        "4294967293",  # SLURM_PENDING_STEP
        "4294967294",  # SLURM_BATCH_SCRIPT
        "4294967295",  # SLURM_EXTERN_CONT
    }
)


class HostlistError(ValueError):
    """A malformed hostlist expression; the message is what is wrong (``reason``)."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------- hostlists


class _Range(NamedTuple):
    lo: int
    hi: int
    width: int  # zero-padding width: the length of the written lower bound

    def size(self) -> int:
        return self.hi - self.lo + 1

    def numbers(self) -> Iterable[str]:
        return (f"{n:0{self.width}d}" for n in range(self.lo, self.hi + 1))


_Group = Tuple[_Range, ...]
_Part = Union[str, _Group]  # a literal piece of a name or one bracket group
_Item = Tuple[_Part, ...]  # one comma-separated entry


def _parse_group(text: str, inner: str) -> _Group:
    if inner == "":
        raise HostlistError(text, "empty brackets '[]'")
    ranges: List[_Range] = []
    for piece in inner.split(","):
        match = _RANGE_RE.fullmatch(piece)
        if match is None:
            what = "empty entry" if piece == "" else f"{piece!r} is not a number or range"
            raise HostlistError(text, f"{what} in brackets '[{inner}]'")
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        if max(len(lo_text), len(hi_text)) > _MAX_DIGITS:
            raise HostlistError(text, f"number in {piece!r} has more than {_MAX_DIGITS} digits")
        lo, hi = int(lo_text), int(hi_text)
        if lo > hi:
            raise HostlistError(text, f"range {piece!r} is decreasing")
        ranges.append(_Range(lo, hi, len(lo_text)))
    return tuple(ranges)


def _item_size(item: _Item) -> int:
    size = 1
    for part in item:
        if not isinstance(part, str):
            size *= sum(r.size() for r in part)
    return size


def _parse_hostlist(text: str) -> List[_Item]:
    """Check ``text`` and split it into items without expanding any range."""
    items: List[_Item] = []
    parts: List[_Part] = []
    literal = ""
    total = 0
    pos = 0
    stripped = text.strip()

    def finish_item() -> None:
        nonlocal literal, parts, total
        if literal:
            parts.append(literal)
        if not parts:
            raise HostlistError(text, "empty host name (leading, trailing or doubled comma)")
        item = tuple(parts)
        total += _item_size(item)
        if total > MAX_HOSTS:
            raise HostlistError(text, f"expands to more than {MAX_HOSTS} hosts")
        items.append(item)
        literal, parts = "", []

    if stripped == "":
        return items
    while pos < len(stripped):
        char = stripped[pos]
        if char == ",":
            finish_item()
        elif char == "[":
            close = stripped.find("]", pos + 1)
            if close < 0:
                raise HostlistError(text, "'[' without matching ']'")
            inner = stripped[pos + 1 : close]
            if "[" in inner:
                raise HostlistError(text, "nested '['")
            if literal:
                parts.append(literal)
                literal = ""
            parts.append(_parse_group(text, inner))
            pos = close
        elif char == "]":
            raise HostlistError(text, "']' without matching '['")
        elif char.isspace():
            raise HostlistError(text, "whitespace inside the list")
        else:
            literal += char
        pos += 1
    finish_item()
    return items


def _expand_item(item: _Item) -> Iterable[str]:
    choices = [[part] if isinstance(part, str) else _group_names(part) for part in item]
    return ("".join(combo) for combo in itertools.product(*choices))


def _group_names(group: _Group) -> List[str]:
    return [number for r in group for number in r.numbers()]


def expand_hostlist(text: str) -> List[str]:
    """Expand a Slurm hostlist such as ``'jwb[0001-0003],rack[1-2]n[1,3]'`` into host names.

    Order and duplicates are kept; several bracket groups in one name expand like Slurm, the
    leftmost group varying slowest. Zero padding follows the written lower bound of each range.
    An empty (or blank) string gives ``[]``. Raises :class:`HostlistError` for malformed input or
    more than :data:`MAX_HOSTS` hosts.
    """
    return [host for item in _parse_hostlist(text) for host in _expand_item(item)]


def first_host(text: str) -> str:
    """Return ``expand_hostlist(text)[0]`` without expanding the ranges.

    Raises :class:`HostlistError` for the same inputs as :func:`expand_hostlist`, and for an
    empty list.
    """
    items = _parse_hostlist(text)
    if not items:
        raise HostlistError(text, "no hosts")
    return "".join(
        part if isinstance(part, str) else f"{part[0].lo:0{part[0].width}d}" for part in items[0]
    )


# --------------------------------------------------------------------------- environment


def _tasks_per_node(text: str) -> Tuple[int, ...]:
    counts: List[int] = []
    for piece in text.split(","):
        match = _TASKS_RE.fullmatch(piece)
        if match is None or any(len(g) > _MAX_DIGITS for g in match.groups() if g):
            raise ValueError(f"{piece!r} is not a count")
        repeat = int(match.group(2) or "1")
        if repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise ValueError(f"{piece!r} repeats {repeat} times (at most {MAX_HOSTS} nodes)")
        counts.extend([int(match.group(1))] * repeat)
    return tuple(counts)


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if _DIGITS_RE.fullmatch(text) is None or len(text) > _MAX_DIGITS or int(text) < minimum:
            raise ValueError(text)
        return int(text)

    return parse


def _hostlist(text: str) -> str:
    _parse_hostlist(text)
    return text


def _node_count(nodelist: object, tasks_per_node: object) -> Optional[int]:
    """The node count when no ``*_NUM_NODES`` variable says it: the hosts of the node list,
    else the nodes of the task layout (None when neither is known)."""
    if isinstance(nodelist, str):
        count = sum(_item_size(item) for item in _parse_hostlist(nodelist))
        return count or None
    if isinstance(tasks_per_node, tuple) and tasks_per_node:
        return len(tasks_per_node)
    return None


def _count_accepts(minimum: int) -> str:
    return "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"


class _Field(NamedTuple):
    names: Tuple[str, ...]
    parse: Callable[[str], object]
    accepted: str


#: Step variables come before job ones; a bad value in the first variable that is set is a
#: problem of its field even when a later one would be fine (never a silent fallback).
_FIELDS: Dict[str, _Field] = {
    "node_id": _Field(("SLURM_NODEID",), _count(0), _count_accepts(0)),
    "tasks_per_node": _Field(
        ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"), _tasks_per_node, _TASKS_ACCEPTS
    ),
    "nodelist": _Field(
        ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        _hostlist,
        HOSTLIST_ACCEPTS,
    ),
    "num_nodes": _Field(
        ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        _count(1),
        _count_accepts(1),
    ),
    "gpus_on_node": _Field(("SLURM_GPUS_ON_NODE",), _count(0), _count_accepts(0)),
    "cpus_per_task": _Field(("SLURM_CPUS_PER_TASK",), _count(1), _count_accepts(1)),
    "restart_count": _Field(("SLURM_RESTART_COUNT",), _count(0), _count_accepts(0)),
}


class SlurmStep(NamedTuple):
    """What Slurm's environment says about the current job and step.

    ``nodelist`` is the step's (else the job's) hostlist expression, already checked; expand it
    with :func:`expand_hostlist`. A field whose variable is bad is None and has a problem.
    ``num_nodes`` without a ``*_NUM_NODES`` variable is counted from the node list (else the
    task layout).
    """

    job_id: Optional[str] = None
    step_id: Optional[str] = None
    node_id: Optional[int] = None
    tasks_per_node: Tuple[int, ...] = ()
    nodelist: Optional[str] = None
    num_nodes: Optional[int] = None
    gpus_on_node: Optional[int] = None
    cpus_per_task: Optional[int] = None
    system_name: Optional[str] = None
    #: How often the job was requeued (Slurm sets it from the first requeue on).
    restart_count: Optional[int] = None
    #: The folder the job was submitted from (``SLURM_SUBMIT_DIR``).
    submit_dir: Optional[str] = None
    #: (field, one-line error) for every field whose variable could not be read.
    problems: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional[SlurmStep]:
        """Read ``env``; None unless ``SLURM_JOB_ID`` (or ``SLURM_NODEID``) is set."""
        job_id = envvars.value(env, "SLURM_JOB_ID")
        if job_id is None and envvars.value(env, "SLURM_NODEID") is None:
            return None
        values: Dict[str, object] = {}
        problems: List[Tuple[str, str]] = []
        for field, spec in _FIELDS.items():
            name = next((n for n in spec.names if envvars.value(env, n) is not None), None)
            if name is None:
                continue
            try:
                values[field] = envvars.parsed(env, name, spec.parse, spec.accepted)
            except ConfigError as exc:
                problems.append((field, str(exc)))
        if not any(envvars.value(env, n) is not None for n in _FIELDS["num_nodes"].names):
            counted = _node_count(values.get("nodelist"), values.get("tasks_per_node"))
            if counted is not None:
                values["num_nodes"] = counted
        return cls(
            job_id=job_id,
            step_id=envvars.value(env, "SLURM_STEP_ID"),
            system_name=envvars.value(env, "SYSTEMNAME"),
            submit_dir=envvars.value(env, "SLURM_SUBMIT_DIR"),
            problems=tuple(problems),
            **values,  # type: ignore[arg-type]
        )

    def problem(self, *fields: str) -> Optional[str]:
        """The first problem among ``fields`` (all fields when none are named)."""
        for field, message in self.problems:
            if not fields or field in fields:
                return message
        return None

    def need(self, *fields: str) -> None:
        """Raise the first problem among ``fields`` (the launch needs them)."""
        message = self.problem(*fields)
        if message is not None:
            raise ConfigError(message)

    @property
    def in_step(self) -> bool:
        """True inside an ``srun`` step; False in the batch script, extern or interactive step."""
        return (
            self.job_id is not None
            and self.step_id is not None
            and self.step_id.lower() not in _NOT_A_STEP
        )

    @property
    def is_multi_node(self) -> bool:
        """True when the step (or, outside a step, the job) spans more than one node."""
        if self.num_nodes is not None:
            return self.num_nodes > 1
        if self.nodelist is not None:
            return sum(_item_size(item) for item in _parse_hostlist(self.nodelist)) > 1
        return len(self.tasks_per_node) > 1

    def nodes_beyond(self, nodes: int) -> int:
        """How many of this step's nodes are beyond ``nodes`` (spares for ``--nnodes``' maximum;
        0 outside a step or when its size is unknown)."""
        if not self.in_step or self.num_nodes is None:
            return 0
        return max(self.num_nodes - nodes, 0)

    @property
    def tasks_on_this_node(self) -> Optional[int]:
        """The task count of this node from ``tasks_per_node`` and ``node_id``, if known."""
        if self.node_id is None:
            return self.tasks_per_node[0] if len(self.tasks_per_node) == 1 else None
        if self.node_id < len(self.tasks_per_node):
            return self.tasks_per_node[self.node_id]
        return None


# --------------------------------------------------------------------------- rendezvous


def rendezvous_port(job_id: str) -> int:
    """A port in ``PORT_BASE .. PORT_BASE + PORT_SPAN - 1`` that depends only on ``job_id``.

    A numeric id maps to ``PORT_BASE + id % PORT_SPAN``, so jobs submitted close together get
    different ports; any other id (``'1234_5'``, ``'1234+0'``) maps through a SHA-256 hash, so that
    array or heterogeneous components never share the port of their parent id.
    """
    if _DIGITS_RE.fullmatch(job_id) is not None and len(job_id) <= _MAX_DIGITS:
        key = int(job_id)
    else:
        key = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")
    return PORT_BASE + key % PORT_SPAN


def rendezvous_id(step: SlurmStep) -> str:
    """The rendezvous id shared by all agents of a step: ``slurm-<job>-<step>``
    (``slurm-<job>`` outside a step)."""
    assert step.job_id is not None, "only for a step in a job"
    if step.step_id is None:
        return f"slurm-{step.job_id}"
    return f"slurm-{step.job_id}-{step.step_id}"
