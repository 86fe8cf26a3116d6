"""Benchmark: what torchrun_jsc adds to a launch, and what planning costs.

1. Paired launches of the console scripts `torchrun_jsc` vs `torchrun`, both
   `--standalone --nproc-per-node=1` on a no-op script, alternating order; median wall time and
   median peak RSS (the launcher process and its waited-for children, from wait4) and their
   ratios. Both run with their bytecode cached, as after `pip install` (which compiles every
   module): the launches get a bytecode cache folder of their own (PYTHONPYCACHEPREFIX, filled by
   the warm-up launches) and never PYTHONDONTWRITEBYTECODE; otherwise this checkout's modules
   would be compiled at every launch and torch's would not.
2. The planning step alone (settings, torch's parser, plan) and the fact gathering (interfaces,
   resolving, route lookup) for a multi-node command line, repeated in this process.

Prints the figures and, with --record, writes them into docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from record import record  # noqa: E402


def launch(argv: List[str], env: Dict[str, str]) -> Tuple[float, int]:
    """Run one launch; return (wall seconds, peak RSS in KiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"launch failed ({proc.returncode}): {' '.join(argv)}")
    return wall, int(usage.ru_maxrss)


def paired(rounds: int) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "noop.py"
        script.write_text("pass\n")
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PET_", "TORCHRUN_JSC")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env["TMPDIR"] = tmp
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        common = ["--standalone", "--nproc-per-node=1", str(script)]
        # the two console scripts, as users start them (`python -m torch.distributed.run`
        # would execute run.py twice: once imported, once as __main__)
        bindir = Path(sys.executable).parent
        plain = [str(bindir / "torchrun"), *common]
        ours = [str(bindir / "torchrun_jsc"), *common]
        launch(ours, env)  # warm the page cache, fill the bytecode cache (ours imports both)
        launch(plain, env)
        walls: Dict[str, List[float]] = {"plain": [], "ours": []}
        rss: Dict[str, List[int]] = {"plain": [], "ours": []}
        for i in range(rounds):
            order = [("plain", plain), ("ours", ours)]
            if i % 2:
                order.reverse()
            for name, argv in order:
                wall, peak = launch(argv, env)
                walls[name].append(wall)
                rss[name].append(peak)
    ratios = [o / p for o, p in zip(walls["ours"], walls["plain"])]
    return {
        "rounds": rounds,
        "torchrun_median_s": statistics.median(walls["plain"]),
        "torchrun_jsc_median_s": statistics.median(walls["ours"]),
        "median_paired_wall_ratio": statistics.median(ratios),
        "ratio_of_medians": statistics.median(walls["ours"]) / statistics.median(walls["plain"]),
        "torchrun_peak_rss_mib": statistics.median(rss["plain"]) / 1024,
        "torchrun_jsc_peak_rss_mib": statistics.median(rss["ours"]) / 1024,
        "peak_rss_ratio": statistics.median(rss["ours"]) / statistics.median(rss["plain"]),
    }


def planning(repeat: int) -> Dict[str, float]:
    import torch

    from torchrun_jsc import facts
    from torchrun_jsc.plan import make_plan
    from torchrun_jsc.request import read_request

    argv = [
        "--nnodes=4",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "localhost-bench:29500",
        "--rdzv-conf",
        "join_timeout=30",
        "train.py",
        "--epochs",
        "1",
    ]
    env = {"SLURM_NODEID": "1"}
    node = facts.NodeFacts(
        hostname="node1",
        endpoint_host="node0i",
        endpoint_addresses=("10.78.0.10",),
        route_sources={"10.78.0.10": "10.78.0.11"},
    )
    make_plan(read_request(argv, env), str(torch.__version__), node)  # imports, first parser
    plan_times, gather_times = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        make_plan(read_request(argv, env), str(torch.__version__), node)
        plan_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        facts.gather("127.0.0.1", 1.0)
        gather_times.append(time.perf_counter() - t0)
    return {
        "repeat": repeat,
        "planning_median_ms": statistics.median(plan_times) * 1000,
        "planning_max_ms": max(plan_times) * 1000,
        "gather_median_ms": statistics.median(gather_times) * 1000,
        "gather_max_ms": max(gather_times) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="paired launches")
    parser.add_argument("--repeat", type=int, default=50, help="planning repetitions")
    parser.add_argument("--record", action="store_true", help="write into docs/benchmarks.md")
    args = parser.parse_args()
    figures = {**planning(args.repeat), **paired(args.rounds)}
    lines = [f"| {k} | {v:.4g} |" for k, v in figures.items()]
    table = "\n".join(["| figure | value |", "|---|---|", *lines])
    print(table)
    if args.record:
        record("launch-overhead", table, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
