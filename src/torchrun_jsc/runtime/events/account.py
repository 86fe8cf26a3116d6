"""A run's account from its events: how long it ran, its rounds, the nodes it lost and how long
each took to train again, its requeue, and the share of its node-hours that trained; and the
summary line the rendezvous host prints at the run's end. Pure.

A round trains from its forming until the first of: the last sign of a node lost from it, the
next round, the stop, the run's end. The allocation's node-hours are its node count (the
launch's ``nodes``, else the largest round with its spares) times the run's length."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .entry import END, HANDOVER, LAUNCH, LOST, REQUEUE, ROUND, STOP, Entry, iso, parse_time


class Round(NamedTuple):
    """A round: when it formed, the job's restart count, its members' names, the node-seconds
    it trained and when it stopped training."""

    time: float
    restart: int
    members: Tuple[str, ...]
    trained: float
    until: float


class Loss(NamedTuple):
    """A node lost: its name, its last sign of life, when it was declared lost, and the
    seconds from its last sign to the next round (None: the run did not train again)."""

    name: str
    last_seen: float
    declared: float
    back_after: Optional[float]


class Handover(NamedTuple):
    """The rendezvous host lost and the next one logged it: when, and the new host."""

    time: float
    host: str


class Account(NamedTuple):
    """One run (``job``, ``run``) of a job."""

    job: str
    run: int
    start: float
    end: float
    nodes: int
    rounds: Tuple[Round, ...]
    losses: Tuple[Loss, ...]
    handovers: Tuple[Handover, ...]
    requeued: bool
    exit_code: Optional[int]
    #: The node-seconds the rounds trained.
    trained: float

    @property
    def length(self) -> float:
        """Seconds from the first event to the last."""
        return max(self.end - self.start, 0.0)

    @property
    def restarts(self) -> int:
        """The rounds after the first."""
        return max(len(self.rounds) - 1, 0)

    @property
    def goodput(self) -> Optional[float]:
        """The share of the allocation's node-hours that trained (None: not known)."""
        total = self.nodes * self.length
        return min(self.trained / total, 1.0) if total > 0 else None


def runs(entries: Sequence[Entry]) -> List[Account]:
    """The accounts of every run among ``entries`` (any order), in time order."""
    grouped: Dict[Tuple[str, int], List[Entry]] = {}
    for entry in sorted(entries, key=lambda e: e.time):
        grouped.setdefault((entry.job, entry.run), []).append(entry)
    return sorted((account(group) for group in grouped.values()), key=lambda a: a.start)


def name_of(value: Any) -> str:
    """A node's name from an event's field (``{"name": ..., "node_rank": ...}``)."""
    if isinstance(value, dict):
        name, rank = value.get("name"), value.get("node_rank")
        shown = str(name) if name else "?"
        return f"{shown} (node rank {rank})" if isinstance(rank, int) else shown
    return str(value)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def account(entries: Sequence[Entry]) -> Account:
    """The account of one run's ``entries`` (in time order, of one job and run)."""
    first, last = entries[0], entries[-1]
    nodes = 0
    formed: List[Tuple[float, int, Tuple[str, ...], int]] = []
    lost: List[Tuple[str, float, float]] = []
    cuts: List[float] = []  # when training stopped: a lost node's last sign, a stop, the end
    handovers: List[Handover] = []
    requeued, exit_code = False, None
    for entry in entries:
        if entry.event == LAUNCH:
            nodes = max(nodes, _count(entry.get("nodes")))
        elif entry.event == ROUND:
            members = entry.get("members")
            names = tuple(name_of(m) for m in members) if isinstance(members, list) else ()
            size = len(names) or _count(entry.get("size"))
            restart = _count(entry.get("restart"))
            formed.append((entry.time, restart, names, size))
            nodes = max(nodes, size + _count(entry.get("spares")))
        elif entry.event == LOST:
            seen = parse_time(entry.get("last_seen", "")) if entry.get("last_seen") else None
            since = entry.time if seen is None else min(seen, entry.time)
            lost.append((name_of(entry.get("lost")), since, entry.time))
            cuts.append(since)
        elif entry.event == STOP:
            cuts.append(entry.time)
        elif entry.event == HANDOVER:
            handovers.append(Handover(entry.time, entry.node))
        elif entry.event == REQUEUE:
            requeued = requeued or entry.get("done") is True
        elif entry.event == END:
            code = entry.get("exit_code")
            exit_code = code if isinstance(code, int) else exit_code
    end = last.time
    rounds: List[Round] = []
    for i, (when, restart, names, size) in enumerate(formed):
        later = [t for t in cuts if t >= when]
        if i + 1 < len(formed):
            later.append(formed[i + 1][0])
        until = max(min(later, default=end), when)
        rounds.append(Round(when, restart, names, size * (until - when), until))
    losses = []
    for name, since, declared in lost:
        back = next((r.time for r in rounds if r.time >= declared), None)
        losses.append(Loss(name, since, declared, None if back is None else back - since))
    return Account(
        job=first.job,
        run=first.run,
        start=first.time,
        end=end,
        nodes=nodes,
        rounds=tuple(rounds),
        losses=tuple(losses),
        handovers=tuple(handovers),
        requeued=requeued,
        exit_code=exit_code,
        trained=sum(r.trained for r in rounds),
    )


def duration(seconds: float) -> str:
    """``2h05m``, ``14m03s``, ``41 s``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs} s"


def clock(seconds: float) -> str:
    """``10:21:07Z`` (UTC)."""
    return iso(seconds)[11:19] + "Z"


def summary_line(run: Account) -> str:
    """The line the rendezvous host prints at the run's end."""
    job = f"job {run.job} run {run.run}" if run.job else "this run"
    rounds = len(run.rounds)
    parts = [
        f"{job} ran {duration(run.length)}",
        f"{rounds} round{'s' * (rounds != 1)}, {run.restarts} restart{'s' * (run.restarts != 1)}",
    ]
    if run.losses:
        lost = "; ".join(
            f"{loss.name} at {clock(loss.last_seen)}, "
            + (
                "not trained again"
                if loss.back_after is None
                else f"training again after {duration(loss.back_after)}"
            )
            for loss in run.losses
        )
        parts.append(f"lost {lost}")
    elif not run.handovers:
        parts.append("no node lost")
    if run.handovers:
        count = len(run.handovers)
        hosts = "the rendezvous host" if count == 1 else f"{count} rendezvous hosts"
        parts.append(f"lost {hosts}: {count} handover{'s' * (count != 1)}")
    parts.append(f"requeues so far {run.run + int(run.requeued)}")
    share = run.goodput
    if share is not None:
        parts.append(f"{share:.0%} of {run.nodes} nodes' time trained")
    return "torchrun_jsc: summary: " + "; ".join(parts)
