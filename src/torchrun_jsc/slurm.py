"""Pure helpers for Slurm: hostlist expressions, the job step environment, rendezvous naming.

Nothing here reads the real environment, touches the network or starts processes; callers pass
``os.environ`` (or any mapping) in. Errors are :class:`ValueError` subclasses whose message is a
single line naming the input and what is accepted.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

from .errors import ConfigError

__all__ = [
    "MAX_HOSTS",
    "PORT_BASE",
    "PORT_SPAN",
    "HostlistError",
    "SlurmEnvError",
    "SlurmStep",
    "compress_hostlist",
    "expand_hostlist",
    "expand_tasks_per_node",
    "first_host",
    "rendezvous_id",
    "rendezvous_port",
]

MAX_HOSTS = 100_000
"""Upper bound on the number of hosts (or task counts) one expression may expand to."""

PORT_BASE = 20_000
"""First port :func:`rendezvous_port` may return."""

PORT_SPAN = 12_000
"""Number of ports :func:`rendezvous_port` chooses from: ``PORT_BASE`` to ``PORT_BASE + 11999``.

20000-31999 lies above the well-known ports (< 1024) and the common service ports below 20000,
and below Linux's default ephemeral range (32768-60999) and IANA's (49152-65535), so an outgoing
connection never already holds the port. It contains torch's default 29500.
"""

_MAX_DIGITS = 18  # longest number accepted anywhere; keeps int() cheap and inside 64 bits
_HOSTLIST_ACCEPTS = (
    "comma-separated host names, each optionally with bracketed lists of numbers and "
    "ranges, e.g. 'node[001-004,010]' or 'rack[1-2]-node[01-02]'"
)
_TASKS_ACCEPTS = "comma-separated counts, each optionally repeated as 'N(xM)', e.g. '2(x3),1'"
_RANGE_RE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TASKS_RE = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_DIGITS_RE = re.compile(r"[0-9]+")
_NUMBERED_RE = re.compile(r"(.*?)([0-9]+)([^0-9]*)", re.DOTALL)
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


def _show(text: str, limit: int = 120) -> str:
    """Quote ``text`` on one line, shortened to about ``limit`` characters."""
    if len(text) > limit:
        return repr(text[:limit]) + "..."
    return repr(text)


class HostlistError(ValueError):
    """A malformed Slurm hostlist expression; ``text`` is the input, ``reason`` what is wrong."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason
        super().__init__(
            f"invalid Slurm hostlist {_show(text)}: {reason}; accepted: {_HOSTLIST_ACCEPTS}"
        )


class SlurmEnvError(ConfigError, ValueError):
    """A Slurm environment variable (or tasks-per-node text) with a value that cannot be used."""


# --------------------------------------------------------------------------- hostlists


class _Range(NamedTuple):
    lo: int
    hi: int
    width: int  # zero-padding width: the length of the written lower bound

    def size(self) -> int:
        return self.hi - self.lo + 1

    def numbers(self) -> Iterable[str]:
        return (f"{n:0{self.width}d}" for n in range(self.lo, self.hi + 1))


_Group = tuple[_Range, ...]
_Part = Union[str, _Group]  # a literal piece of a name or one bracket group
_Item = tuple[_Part, ...]  # one comma-separated entry


def _parse_group(text: str, inner: str) -> _Group:
    if inner == "":
        raise HostlistError(text, "empty brackets '[]'")
    ranges = []
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


def _parse_hostlist(text: str) -> list[_Item]:
    """Check ``text`` and split it into items without expanding any range."""
    items: list[_Item] = []
    parts: list[_Part] = []
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


def _group_names(group: _Group) -> list[str]:
    return [number for r in group for number in r.numbers()]


def expand_hostlist(text: str) -> list[str]:
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


def _check_host_name(host: str) -> None:
    if host == "" or any(c in "[]," or c.isspace() for c in host):
        raise HostlistError(
            host, "a host name to compress must be non-empty, without brackets, commas or spaces"
        )


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Write ``hosts`` as a short Slurm hostlist, keeping order and duplicates.

    Neighbouring names that differ only in their last number share one bracket group when that
    is shorter, so ``expand_hostlist(compress_hostlist(hosts)) == list(hosts)``. Meant for messages.
    """
    out: list[str] = []
    key: Optional[tuple[str, str]] = None
    ranges: list[_Range] = []

    def flush() -> None:
        if key is None or not ranges:
            return
        prefix, suffix = key
        texts = [
            f"{r.lo:0{r.width}d}" if r.size() == 1 else f"{r.lo:0{r.width}d}-{r.hi:0{r.width}d}"
            for r in ranges
        ]
        bracketed = f"{prefix}[{','.join(texts)}]{suffix}"
        plain = ",".join(prefix + number + suffix for r in ranges for number in r.numbers())
        out.append(plain if len(plain) <= len(bracketed) else bracketed)
        ranges.clear()

    for host in hosts:
        _check_host_name(host)
        match = _NUMBERED_RE.fullmatch(host)
        if match is None or len(match.group(2)) > _MAX_DIGITS:
            flush()
            key = None
            out.append(host)
            continue
        prefix, digits, suffix = match.groups()
        number = int(digits)
        if key != (prefix, suffix):
            flush()
            key = (prefix, suffix)
        last = ranges[-1] if ranges else None
        if last is not None and number == last.hi + 1 and f"{number:0{last.width}d}" == digits:
            ranges[-1] = last._replace(hi=number)
        else:
            ranges.append(_Range(number, number, len(digits)))
    flush()
    return ",".join(out)


# --------------------------------------------------------------------------- environment


def _parse_tasks_per_node(text: str, name: str) -> list[int]:
    counts: list[int] = []
    if text.strip() == "":
        return counts
    for piece in text.strip().split(","):
        match = _TASKS_RE.fullmatch(piece)
        if match is None or any(len(g) > _MAX_DIGITS for g in match.groups() if g):
            raise SlurmEnvError(
                f"{name}={_show(text)} is not valid: {piece!r} is not a count; "
                f"accepted: {_TASKS_ACCEPTS}"
            )
        repeat = int(match.group(2) or "1")
        if repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise SlurmEnvError(
                f"{name}={_show(text)} is not valid: {piece!r} repeats {repeat} times; "
                f"accepted: {_TASKS_ACCEPTS}, at most {MAX_HOSTS} nodes"
            )
        counts.extend([int(match.group(1))] * repeat)
    return counts


def expand_tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's tasks-per-node format, e.g. ``'2(x3),1'`` -> ``[2, 2, 2, 1]``.

    An empty string gives ``[]``; anything else malformed raises :class:`SlurmEnvError`.
    """
    return _parse_tasks_per_node(text, "tasks-per-node")


def _lookup(env: Mapping[str, str], names: Sequence[str]) -> Optional[tuple[str, str]]:
    """Return ``(name, value)`` of the first variable in ``names`` set to a non-empty value."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return name, value.strip()
    return None


def _env_int(env: Mapping[str, str], names: Sequence[str], minimum: int) -> Optional[int]:
    found = _lookup(env, names)
    if found is None:
        return None
    name, value = found
    if _DIGITS_RE.fullmatch(value) is None or len(value) > _MAX_DIGITS or int(value) < minimum:
        what = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise SlurmEnvError(f"{name}={_show(value)} is not valid: accepted: {what}")
    return int(value)


def _env_str(env: Mapping[str, str], names: Sequence[str]) -> Optional[str]:
    found = _lookup(env, names)
    return None if found is None else found[1]


def _env_hostlist(env: Mapping[str, str], names: Sequence[str]) -> Optional[str]:
    found = _lookup(env, names)
    if found is None:
        return None
    name, value = found
    try:
        _parse_hostlist(value)
    except HostlistError as exc:
        raise SlurmEnvError(
            f"{name}={_show(value)} is not valid: {exc.reason}; accepted: {_HOSTLIST_ACCEPTS}"
        ) from exc
    return value


@dataclass(frozen=True)
class SlurmStep:
    """What Slurm's environment says about the current job and step.

    Variables set to an empty string count as unset. Nodelists are kept as hostlist expressions
    (already checked); expand them with :func:`expand_hostlist`.
    """

    job_id: str
    step_id: Optional[str] = None
    node_id: Optional[int] = None
    proc_id: Optional[int] = None
    local_id: Optional[int] = None
    ntasks: Optional[int] = None
    tasks_per_node: tuple[int, ...] = ()
    step_nodelist: Optional[str] = None
    job_nodelist: Optional[str] = None
    num_nodes: Optional[int] = None
    gpus_on_node: Optional[int] = None
    cluster_name: Optional[str] = None
    system_name: Optional[str] = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional[SlurmStep]:
        """Read ``env``; None unless ``SLURM_JOB_ID`` is set. Bad values raise SlurmEnvError.

        Step variables win over job ones: ``SLURM_STEP_NUM_TASKS`` over ``SLURM_NTASKS``,
        ``SLURM_STEP_TASKS_PER_NODE`` over ``SLURM_TASKS_PER_NODE``, ``SLURM_STEP_NODELIST`` over
        ``SLURM_JOB_NODELIST`` and ``SLURM_NODELIST``, ``SLURM_STEP_NUM_NODES`` over
        ``SLURM_JOB_NUM_NODES`` and ``SLURM_NNODES``.
        """
        job_id = _env_str(env, ["SLURM_JOB_ID"])
        if job_id is None:
            return None
        tasks = _lookup(env, ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"])
        job_nodelist = _env_hostlist(env, ["SLURM_JOB_NODELIST", "SLURM_NODELIST"])
        return cls(
            job_id=job_id,
            step_id=_env_str(env, ["SLURM_STEP_ID"]),
            node_id=_env_int(env, ["SLURM_NODEID"], 0),
            proc_id=_env_int(env, ["SLURM_PROCID"], 0),
            local_id=_env_int(env, ["SLURM_LOCALID"], 0),
            ntasks=_env_int(env, ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"], 1),
            tasks_per_node=tuple(_parse_tasks_per_node(tasks[1], tasks[0])) if tasks else (),
            step_nodelist=_env_hostlist(env, ["SLURM_STEP_NODELIST"]) or job_nodelist,
            job_nodelist=job_nodelist,
            num_nodes=_env_int(
                env, ["SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"], 1
            ),
            gpus_on_node=_env_int(env, ["SLURM_GPUS_ON_NODE"], 0),
            cluster_name=_env_str(env, ["SLURM_CLUSTER_NAME"]),
            system_name=_env_str(env, ["SYSTEMNAME"]),
        )

    @property
    def in_step(self) -> bool:
        """True inside an ``srun`` step; False in the batch script, extern or interactive step."""
        return self.step_id is not None and self.step_id.lower() not in _NOT_A_STEP

    @property
    def is_multi_node(self) -> bool:
        """True when the step (or, outside a step, the job) spans more than one node."""
        if self.num_nodes is not None:
            return self.num_nodes > 1
        if self.step_nodelist is not None:
            return sum(_item_size(item) for item in _parse_hostlist(self.step_nodelist)) > 1
        return len(self.tasks_per_node) > 1

    @property
    def tasks_on_this_node(self) -> Optional[int]:
        """The task count of this node from ``tasks_per_node`` and ``node_id``, if known."""
        if self.node_id is None:
            return self.tasks_per_node[0] if len(self.tasks_per_node) == 1 else None
        if self.node_id < len(self.tasks_per_node):
            return self.tasks_per_node[self.node_id]
        return None


# --------------------------------------------------------------------------- rendezvous


def rendezvous_port(job_id: str, *, base: int = PORT_BASE, span: int = PORT_SPAN) -> int:
    """Return a port in ``[base, base + span)`` that depends only on ``job_id``.

    A numeric id maps to ``base + id % span``, so jobs submitted close together get different
    ports; any other id (``'1234_5'``, ``'1234+0'``) maps through a SHA-256 hash, so that array or
    heterogeneous components never share the port of their parent id.
    """
    if job_id == "" or job_id != job_id.strip():
        raise ValueError(f"job id {job_id!r} is not valid: accepted: a non-empty Slurm job id")
    if span < 1 or base < 1024 or base + span > 65536:
        raise ValueError(
            f"port range base={base} span={span} is not valid: "
            "accepted: 1024 <= base and base + span <= 65536, span >= 1"
        )
    if _DIGITS_RE.fullmatch(job_id) is not None and len(job_id) <= _MAX_DIGITS:
        key = int(job_id)
    else:
        key = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")
    return base + key % span


def rendezvous_id(step: SlurmStep) -> str:
    """Return the rendezvous id shared by all agents of a step: ``slurm-<job>-<step>``.

    Outside a step (no ``step_id``) it is ``slurm-<job>``.
    """
    if step.step_id is None:
        return f"slurm-{step.job_id}"
    return f"slurm-{step.job_id}-{step.step_id}"
