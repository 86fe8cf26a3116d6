"""A job across its runs, from the event logs' entries, and its table. Pure."""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

from ..runtime.events.account import Account, clock, duration, runs
from ..runtime.events.entry import Entry, iso


class Gap(NamedTuple):
    """The time between two runs of a requeued job (in the queue, starting again)."""

    after: int
    before: int
    seconds: float


class Job(NamedTuple):
    """The runs of one job, in time order, and the gaps between them."""

    job: str
    runs: Tuple[Account, ...]
    gaps: Tuple[Gap, ...]

    @property
    def trained(self) -> float:
        """Node-seconds trained in all runs."""
        return sum(r.trained for r in self.runs)

    @property
    def goodput(self) -> float | None:
        """The share of the runs' node-seconds that trained (None: not known)."""
        total = sum(r.nodes * r.length for r in self.runs)
        return min(self.trained / total, 1.0) if total > 0 else None


def jobs(entries: Sequence[Entry]) -> List[Job]:
    """Every job among ``entries`` (several files merge by time), in time order."""
    found: List[Job] = []
    accounts = runs(entries)
    for name in dict.fromkeys(a.job for a in accounts):
        mine = tuple(a for a in accounts if a.job == name)
        gaps = tuple(Gap(a.run, b.run, max(b.start - a.end, 0.0)) for a, b in zip(mine, mine[1:]))
        found.append(Job(name, mine, gaps))
    return found


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def table(job: Job) -> str:
    """The job in a few lines: a headline, one row per run, the time lost to each loss and
    each requeue."""
    losses = [loss for run in job.runs for loss in run.losses]
    back = [loss for loss in losses if loss.back_after is not None]
    requeues = sum(1 for run in job.runs if run.requeued)
    rounds = sum(len(run.rounds) for run in job.runs)
    name = f"job {job.job}" if job.job else "job (outside Slurm)"
    lines = [
        f"{name}: {len(job.runs)} run{'s' * (len(job.runs) != 1)}, {rounds} rounds,"
        f" {len(losses)} node{'s' * (len(losses) != 1)} lost, {len(back)} recovered inside"
        f" the allocation, {requeues} requeue{'s' * (requeues != 1)};"
        f" {_share(job.goodput)} of the nodes' time trained",
        "",
        "run  started (UTC)         length  nodes  rounds  lost  handovers  end      trained",
    ]
    for run in job.runs:
        end = (
            "requeued"
            if run.requeued
            else "-"
            if run.exit_code is None
            else f"exit {run.exit_code}"
        )
        lines.append(
            f"{run.run:<4} {iso(run.start)[:19].replace('T', ' '):<21} {duration(run.length):>7}"
            f"  {run.nodes:>5}  {len(run.rounds):>6}  {len(run.losses):>4}"
            f"  {len(run.handovers):>9}  {end:<8} {_share(run.goodput):>7}"
        )
    lost_time = [
        f"run {run.run}: {loss.name} at {clock(loss.last_seen)}, "
        + (
            f"training again after {duration(loss.back_after)}"
            if loss.back_after is not None
            else "not trained again in that run"
        )
        for run in job.runs
        for loss in run.losses
    ]
    lost_time += [
        f"requeue: run {gap.after} to run {gap.before}: {duration(gap.seconds)} until the next"
        " run started"
        for gap in job.gaps
    ]
    if lost_time:
        lines += ["", "time lost:", *(f"  {line}" for line in lost_time)]
    return "\n".join(lines)
