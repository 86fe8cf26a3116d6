"""The job's timeline: one row per node, time across (minutes since the job's first event), the
rounds each node trained in, losses, handovers and the gaps between runs. The rows are pure
(:func:`rows`); drawing them needs matplotlib (the ``report`` extra)."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

from .job import Job

#: What ``--plot`` writes, by the file's suffix.
FORMATS = (".png", ".svg")


class Row(NamedTuple):
    """One node: its name and the spans (start, end, seconds since the job's start) it
    trained in; where it was lost (seconds)."""

    node: str
    spans: Tuple[Tuple[float, float], ...]
    lost: Tuple[float, ...]


class Timeline(NamedTuple):
    """The rows in node order, the rounds' starts (with their restart count), the handovers'
    and the runs' starts, and the gaps between runs (seconds since the job's start)."""

    rows: Tuple[Row, ...]
    rounds: Tuple[Tuple[float, int], ...]
    handovers: Tuple[float, ...]
    runs: Tuple[float, ...]
    gaps: Tuple[Tuple[float, float], ...]
    length: float


def _order(name: str) -> Tuple[int, str]:
    """Node-rank order where the name says it (``node3 (node rank 3)``), then by name."""
    rank = name.rsplit("node rank ", 1)[-1].rstrip(")") if "node rank " in name else ""
    return (int(rank) if rank.isdigit() else 1 << 30, name)


def rows(job: Job) -> Timeline:
    """The timeline of ``job``."""
    start = job.runs[0].start
    spans: Dict[str, List[Tuple[float, float]]] = {}
    lost: Dict[str, List[float]] = {}
    for run in job.runs:
        for rnd in run.rounds:
            for member in rnd.members:
                spans.setdefault(member, []).append((rnd.time - start, rnd.until - start))
        for loss in run.losses:
            spans.setdefault(loss.name, [])
            lost.setdefault(loss.name, []).append(loss.last_seen - start)
    ordered = sorted(spans, key=_order)
    gaps = tuple((a.end - start, b.start - start) for a, b in zip(job.runs, job.runs[1:]))
    return Timeline(
        rows=tuple(Row(n, tuple(spans[n]), tuple(lost.get(n, ()))) for n in ordered),
        rounds=tuple((r.time - start, r.restart) for run in job.runs for r in run.rounds),
        handovers=tuple(h.time - start for run in job.runs for h in run.handovers),
        runs=tuple(run.start - start for run in job.runs),
        gaps=gaps,
        length=max(run.end for run in job.runs) - start,
    )


def draw(job: Job, path: str) -> None:
    """Draw ``job``'s timeline into ``path`` (``.png`` or ``.svg``); needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = rows(job)
    count = max(len(timeline.rows), 1)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.4 * count))
    minutes = 60.0
    for i, row in enumerate(timeline.rows):
        y = count - 1 - i
        bars = [(a / minutes, max(b - a, 0.0) / minutes) for a, b in row.spans]
        ax.broken_barh(bars, (y - 0.35, 0.7), facecolors="tab:green", label="training")
        for t in row.lost:
            ax.plot(t / minutes, y, "x", color="tab:red", markersize=10, mew=2, label="lost")
    for a, b in timeline.gaps:
        ax.axvspan(a / minutes, b / minutes, color="0.85", label="requeued: between runs")
    for t in timeline.handovers:
        ax.axvline(t / minutes, color="tab:blue", ls="--", label="handover")
    for t, restart in timeline.rounds[1:]:
        ax.axvline(t / minutes, color="0.6", ls=":", lw=1)
        ax.annotate(
            f"restart {restart}" if restart else "round",
            (t / minutes, count - 0.5),
            fontsize="x-small",
            color="0.35",
            xytext=(2, 0),
            textcoords="offset points",
        )
    ax.set_yticks(range(count))
    ax.set_yticklabels([r.node for r in reversed(timeline.rows)] or [""])
    ax.set_xlabel("minutes since the job's first event")
    ax.set_xlim(0, max(timeline.length / minutes, 1 / minutes))
    title = f"job {job.job}" if job.job else "job"
    ax.set_title(f"{title}: {len(job.runs)} run(s), {sum(len(r.rounds) for r in job.runs)} rounds")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(
        unique.values(),
        unique.keys(),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def drawable(path: str) -> bool:
    """Whether ``path`` has a suffix ``--plot`` writes."""
    return path.lower().endswith(FORMATS)
