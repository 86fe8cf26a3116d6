"""Benchmark: what torchrun_jsc adds to a launch, and what planning costs.

A no-op launch takes about 2 s here, and single launches on this 2-core machine spread by
±15 %, so paired end-to-end launches cannot show a 1 % difference in any reasonable number of
rounds. What torchrun_jsc adds is therefore also measured directly, piece by piece:

1. ``marginal``: torchrun_jsc's own part of a launch, in a fresh interpreter each time, after
   ``import torch.distributed.run`` (what plain torchrun imports too): importing torchrun_jsc,
   reading the request, gathering facts, planning and installing the patches (starting the
   orphan watcher included), until torch's ``run.main`` would be called. Median of fresh runs.
   With ``--baseline DIR`` (another checkout's ``src``), that code's own part too, alternating.
2. ``per_worker``: what the ``worker_start`` patch adds to starting one worker, torch's
   ``SubprocessHandler._popen`` patched vs not, alternating, in this process.
3. ``paired``: the console scripts ``torchrun_jsc`` vs ``torchrun``, ``--standalone
   --nproc-per-node=1`` on a no-op script, alternating order; the median paired wall-time ratio
   with a bootstrap 95 % interval, median peak RSS. Both with their bytecode cached, as after
   ``pip install`` (a bytecode cache folder of their own, PYTHONPYCACHEPREFIX, filled by the
   warm-up launches; never PYTHONDONTWRITEBYTECODE).
4. The planning step alone and the fact gathering for a multi-node command line, in this
   process.

``estimated_ratio`` = 1 + (marginal + per_worker) / torchrun's median launch: the launch
overhead from the measured pieces. Prints the figures and, with --record, writes them into
docs/benchmarks.md between markers.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from record import record  # noqa: E402

#: Run in a fresh interpreter: torch first, then torchrun_jsc's whole part of a launch; prints
#: its milliseconds. torch's run.main is replaced by a stop watch, so nothing is launched.
MARGINAL_PROBE = """
import sys, time
import torch.distributed.run as run
started = time.perf_counter()
stopped = []
run.main = lambda argv=None: stopped.append(time.perf_counter())
from torchrun_jsc import cli
cli.main(sys.argv[1:])
print(f"{(stopped[0] - started) * 1000:.3f}")
"""


def clean_env(tmp: str) -> Dict[str, str]:
    """This environment without launcher settings, with a bytecode cache of its own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PET_", "TORCHRUN_JSC")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["TMPDIR"] = tmp
    env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
    return env


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


def bootstrap(values: List[float], repeat: int = 2000) -> Tuple[float, float]:
    """95 % interval of the median of ``values`` (resampled, fixed seed)."""
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(repeat))
    return medians[int(0.025 * repeat)], medians[int(0.975 * repeat)]


def paired(rounds: int, script: Path, env: Dict[str, str]) -> Dict[str, float]:
    common = ["--standalone", "--nproc-per-node=1", str(script)]
    # the two console scripts, as users start them (`python -m torch.distributed.run` would
    # execute run.py twice: once imported, once as __main__)
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
    low, high = bootstrap(ratios)
    return {
        "rounds": rounds,
        "torchrun_median_s": statistics.median(walls["plain"]),
        "torchrun_jsc_median_s": statistics.median(walls["ours"]),
        "median_paired_wall_ratio": statistics.median(ratios),
        "paired_ratio_95_low": low,
        "paired_ratio_95_high": high,
        "ratio_of_medians": statistics.median(walls["ours"]) / statistics.median(walls["plain"]),
        "torchrun_peak_rss_mib": statistics.median(rss["plain"]) / 1024,
        "torchrun_jsc_peak_rss_mib": statistics.median(rss["ours"]) / 1024,
        "peak_rss_ratio": statistics.median(rss["ours"]) / statistics.median(rss["plain"]),
    }


def marginal(
    runs: int, script: Path, env: Dict[str, str], baseline: Optional[Path] = None
) -> Dict[str, float]:
    """Median of fresh runs of the own part; with ``baseline`` (another checkout's ``src``),
    alternating with runs of that code, for a before/after of the same machine and moment."""
    argv = [sys.executable, "-c", MARGINAL_PROBE, "--standalone", "--nproc-per-node=1", str(script)]
    variants = {"": env}
    if baseline is not None:
        variants["baseline_"] = {**env, "PYTHONPATH": str(baseline)}  # before the editable .pth
    times: Dict[str, List[float]] = {name: [] for name in variants}
    for i in range(runs + 1):  # the first fills the bytecode caches
        for name, variant_env in variants.items():
            out = subprocess.run(argv, env=variant_env, capture_output=True, text=True, check=True)
            if i:
                times[name].append(float(out.stdout.strip().splitlines()[-1]))
    figures: Dict[str, float] = {"marginal_runs": runs}
    for name, values in times.items():
        figures[f"{name}marginal_median_ms"] = statistics.median(values)
        figures[f"{name}marginal_min_ms"] = min(values)
    return figures


def per_worker(repeat: int) -> Dict[str, float]:
    """Median added time of starting a worker (``true``) through the patched ``_popen``."""
    from torchrun_jsc import patches
    from torchrun_jsc.patches import params, worker_start
    from torchrun_jsc.patches._common import find

    check = worker_start.CHECKS[0]
    owner, attr, original = find(check.module, check.target)  # torch's class, "_popen"
    cls: Any = owner
    handler: Any = object.__new__(cls)
    handler._stdout = handler._stderr = None
    env = dict(os.environ)

    def start(popen: Any) -> float:
        t0 = time.perf_counter()
        proc = popen(handler, ("true",), env)
        took = time.perf_counter() - t0
        proc.wait()
        return took

    assert patches.install(params.WorkerStart(kill_orphans=True, new_session=False)) is None
    patched = getattr(owner, attr)
    plain_times, patched_times = [], []
    try:
        for _ in range(repeat):
            plain_times.append(start(original))
            patched_times.append(start(patched))
    finally:
        patches.restore_all()  # ends the orphan watcher and forgets the workers
    added = [p - q for p, q in zip(patched_times, plain_times)]
    return {
        "worker_start_repeat": repeat,
        "worker_start_torch_ms": statistics.median(plain_times) * 1000,
        "worker_start_patched_ms": statistics.median(patched_times) * 1000,
        "worker_start_added_ms": statistics.median(added) * 1000,
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
    parser.add_argument("--marginal", type=int, default=30, help="fresh runs of the own part")
    parser.add_argument("--repeat", type=int, default=50, help="planning repetitions")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the src folder of another checkout (git worktree add DIR COMMIT): its own part"
        " measured alternately with this one's",
    )
    parser.add_argument("--record", action="store_true", help="write into docs/benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "noop.py"
        script.write_text("pass\n")
        env = clean_env(tmp)
        figures: Dict[str, float] = {**planning(args.repeat), **per_worker(args.repeat)}
        figures.update(marginal(args.marginal, script, env, args.baseline))
        figures.update(paired(args.rounds, script, env))
    added_s = (figures["marginal_median_ms"] + figures["worker_start_added_ms"]) / 1000
    figures["estimated_ratio"] = 1 + added_s / figures["torchrun_median_s"]
    lines = [f"| {k} | {v:.4g} |" for k, v in figures.items()]
    table = "\n".join(["| figure | value |", "|---|---|", *lines])
    print(table)
    if args.record:
        record("launch-overhead", table, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
