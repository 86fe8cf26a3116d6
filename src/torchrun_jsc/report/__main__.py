"""``python -m torchrun_jsc.report FILE... [--plot PNG|SVG]``: the whole job from its event
logs (several files, one per run or copied from elsewhere, merge by time)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..runtime.events import entry
from . import plot
from .job import jobs, table


def main(argv: Optional[List[str]] = None) -> int:
    """Print the job's table (and draw its timeline); 2 for bad input, 1 for no events."""
    parser = argparse.ArgumentParser(
        prog="python -m torchrun_jsc.report",
        description="What happened to a job: its runs, rounds, lost nodes, recoveries, requeues"
        " and the share of its nodes' time that trained, from torchrun_jsc's event logs.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="event logs (JSON lines)")
    parser.add_argument("--plot", metavar="PNG|SVG", help="draw the timeline into this file")
    args = parser.parse_args(argv)
    if args.plot is not None and not plot.drawable(args.plot):
        return _error(f"--plot {args.plot}: accepted: a file name ending in .png or .svg")
    lines: List[str] = []
    for name in args.files:
        try:
            with open(name, encoding="utf-8", errors="replace") as file:
                lines += file.read().splitlines()
        except OSError as exc:
            return _error(f"{name}: cannot read it ({exc.strerror or exc})")
    found = entry.read(lines)
    if not found.entries:
        print(f"torchrun_jsc.report: no events in {', '.join(args.files)}", file=sys.stderr)
        return 1
    every = jobs(found.entries)
    print("\n\n".join(table(job) for job in every))
    if found.skipped:
        print(f"\n{found.skipped} line(s) skipped: not an event (cut off or corrupted)")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _error(
                "--plot needs matplotlib: pip install 'torchrun_jsc[report]' (or matplotlib)"
            )
        plot.draw(every[-1], args.plot)
        print(f"timeline of job {every[-1].job or '(outside Slurm)'}: {args.plot}")
    return 0


def _error(message: str) -> int:
    print(f"torchrun_jsc.report: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
