"""Benchmark: the preflight protocol for 256, 1,024 and 4,096 simulated nodes on loopback.

The real thing, not a model: every simulated node runs ``run_node_async`` (this checkout's
client, probe port and, on node 0, the collector), each with its own address in 127.0.0.0/8
(node i at 127.1.x.y; Linux answers on the whole /8), its connections bound to it. One process
runs node 0 (the host: collector, its own client and probe port); a few more run the other
nodes, as many in one event loop as the open-files limit allows (its soft limit is raised to
the hard one). Every process imports first; then all get "go" at once, and the wall time runs
from "go" until the last node has its verdict.

Measured per size (median wall time of ``--rounds``, the rest from the slowest round): wall
time, the collector's accepted connections, endpoint connection attempts, probe connections
made and accepted, the most probes made by and to one node, peak RSS of the collector's
process and of the client processes. Checked: the host's verdict is "OK (N nodes)", every node
got it, nobody is probed by more than 8. Once at 1,024 nodes one node joins with a probe port
where nothing listens: the verdict must name it and exactly its probers (printed).

Prints; ``--plot`` writes a PNG (needs matplotlib: the ``bench`` extra); ``--record`` writes the
table into docs/benchmarks.md (section preflight-scale) and the plot to docs/preflight-scale.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's torchrun_jsc, not an installed one
sys.path.insert(0, str(ROOT / "bench"))

from record import record  # noqa: E402
from torchrun_jsc.preflight import MAX_PROBES, probers_of, run_node_async  # noqa: E402
from torchrun_jsc.preflight.client import NodeConfig, run_client  # noqa: E402
from torchrun_jsc.preflight.report import NodeReport  # noqa: E402

SIZES = (256, 1024, 4096)
TIMEOUT = 60.0
#: Open files one simulated client node may hold at once: its endpoint connection, its probe
#: port, up to 6 probes out and 6 accepted in (the assignment's degree), with some slack.
FILES_PER_NODE = 16
GOAL_SECONDS = 10.0
GOAL_COLLECTOR_MIB = 200.0
PLOT = ROOT / "docs" / "preflight-scale.png"


def address(i: int) -> str:
    """Simulated node i's own loopback address."""
    k = i + 1
    return f"127.{1 + k // 65536}.{(k // 256) % 256}.{k % 256}"


def name(i: int) -> str:
    return f"sim{i}"


def raise_file_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return int(hard)
    return int(soft if hard == resource.RLIM_INFINITY else hard)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- worker


def node_config(i: int, n: int, port: int) -> NodeConfig:
    report = NodeReport(name(i), i, i == 0, address(i), None, "lo")
    return NodeConfig(
        report=report,
        endpoint=f"{address(0)}:{port}",
        endpoint_addresses=(address(0),),
        port=port,
        rdzv_id="bench",
        expected=n,
        timeout=TIMEOUT,
        listen_address=address(0),
        source_address=address(i),
    )


async def dead_node(config: NodeConfig) -> Dict[str, Any]:
    """A node that joins with a probe port where nothing listens (bound, never listening)."""
    with socket.socket() as s:
        s.bind((config.report.address or "", 0))
        report = replace(config.report, probe_port=int(s.getsockname()[1]))
        client = await run_client(replace(config, report=report), time.monotonic() + TIMEOUT)
    return {
        "code": 0 if client.ok else 1,
        "line": client.line,
        "targets": len(client.targets),
        "probed_by": 0,
        "attempts": client.attempts,
        "end": time.monotonic(),
    }


async def live_node(config: NodeConfig) -> Dict[str, Any]:
    result = await run_node_async(config)
    line = result.client.line if result.verdict is None else result.verdict.line
    text = result.text.splitlines()
    return {
        "code": result.code,
        "line": line,
        "targets": len(result.client.targets),
        "probed_by": result.probes_accepted or 0,
        "attempts": result.client.attempts,
        "end": time.monotonic(),
        "collector_accepted": result.collector_accepted,
        "header": text[0] if result.verdict is not None else None,
        "last": text[-1],
    }


def worker() -> None:
    """Run the nodes of the job read from stdin after "go"; print one JSON summary."""
    raise_file_limit()
    job = json.loads(sys.stdin.readline())
    n, port, dead = int(job["n"]), int(job["port"]), job.get("dead")
    rss_ready = peak_rss_mib()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return

    async def main() -> List[Dict[str, Any]]:
        runs = [
            dead_node(node_config(i, n, port)) if i == dead else live_node(node_config(i, n, port))
            for i in job["nodes"]
        ]
        return list(await asyncio.gather(*runs))

    nodes = asyncio.run(main())
    summary = {
        "nodes": len(nodes),
        "failed": sum(1 for r in nodes if r["code"] != 0),
        "lines": sorted({str(r["line"]) for r in nodes}),
        "targets_max": max(r["targets"] for r in nodes),
        "targets_sum": sum(r["targets"] for r in nodes),
        "probed_by_max": max(r["probed_by"] for r in nodes),
        "probed_by_min": min(r["probed_by"] for r in nodes),
        "probed_by_sum": sum(r["probed_by"] for r in nodes),
        "attempts": sum(r["attempts"] for r in nodes),
        "end": max(r["end"] for r in nodes),
        "rss_ready_mib": rss_ready,
        "rss_peak_mib": peak_rss_mib(),
        "host": next((r for r in nodes if r.get("collector_accepted") is not None), None),
    }
    print(json.dumps(summary), flush=True)


# --------------------------------------------------------------------------- one job


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def run_job(n: int, per_process: int, dead: Optional[int] = None) -> Dict[str, Any]:
    """Start the processes for an ``n``-node job, say go, gather their summaries."""
    port = free_port(address(0))
    others = list(range(1, n))
    chunks = max(1, math.ceil(len(others) / per_process))
    groups = [[0]] + [others[k::chunks] for k in range(chunks)]
    procs = []
    for group in groups:
        p = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps({"n": n, "port": port, "dead": dead, "nodes": group}) + "\n")
        p.stdin.flush()
        procs.append(p)
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("a worker did not start")
    started = time.monotonic()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    summaries = []
    for p in procs:
        out, _ = p.communicate(timeout=TIMEOUT + 60)
        if p.returncode != 0:
            raise SystemExit(f"a worker failed ({p.returncode})")
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    host, clients = summaries[0], summaries[1:]
    lines = sorted({line for s in summaries for line in s["lines"]})
    return {
        "n": n,
        "processes": len(procs),
        "wall_s": max(s["end"] for s in summaries) - started,
        "failed": sum(s["failed"] for s in summaries),
        "lines": lines,
        "host": host["host"],
        "collector_accepted": host["host"]["collector_accepted"],
        "attempts": sum(s["attempts"] for s in summaries),
        "probe_connects": sum(s["targets_sum"] for s in summaries),
        "probe_accepts": sum(s["probed_by_sum"] for s in summaries),
        "probes_max": max(s["targets_max"] for s in summaries),
        "probed_by_max": max(s["probed_by_max"] for s in summaries),
        "probed_by_min": min(s["probed_by_min"] for s in summaries),
        "collector_rss_mib": host["rss_peak_mib"],
        "collector_rss_ready_mib": host["rss_ready_mib"],
        "client_rss_mib": sum(s["rss_peak_mib"] for s in clients),
        "client_rss_growth_mib": sum(s["rss_peak_mib"] - s["rss_ready_mib"] for s in clients),
    }


def check_ok(job: Dict[str, Any]) -> List[str]:
    """What is wrong with a job that should be OK (empty: nothing)."""
    n, want = job["n"], f"preflight: OK ({job['n']} nodes)"
    problems = []
    if job["lines"] != [want]:
        problems.append(f"verdicts {job['lines'][:3]}")
    if job["failed"]:
        problems.append(f"{job['failed']} nodes failed")
    if job["collector_accepted"] != n:
        problems.append(f"collector accepted {job['collector_accepted']}")
    if job["probed_by_max"] > MAX_PROBES:
        problems.append(f"a node was probed by {job['probed_by_max']}")
    if job["probe_connects"] != job["probe_accepts"]:
        problems.append("probe connects and accepts differ")
    return problems


def check_dead(job: Dict[str, Any], dead: int) -> Tuple[str, List[str]]:
    """The verdict of a job with node ``dead`` unreachable; (verdict, problems)."""
    n = job["n"]
    line = job["host"]["last"]
    probers = ", ".join(name(p) for p in sorted(probers_of(n, dead)))
    want = (
        f"preflight: FAIL: {name(dead)}: its address {address(dead)}:",
        f"is unreachable from every node that probed it: {probers} (Connection refused)",
    )
    problems = []
    if not (line.startswith(want[0]) and line.endswith(want[1]) and line.count(";") == 0):
        problems.append(f"host verdict {line!r}, expected to name {name(dead)} and {probers}")
    if job["lines"] != [line]:
        problems.append(f"nodes got different verdicts: {job['lines'][:3]}")
    return line, problems


# --------------------------------------------------------------------------- report


def table(jobs: List[Dict[str, Any]], rounds: int) -> str:
    rows = [
        "| nodes | processes | wall s (median) | wall s (max) | collector accepts "
        "| endpoint connect attempts | probe connects | probes per node (max) "
        "| probed by (min-max) | all-pairs probes would be | collector peak RSS MiB "
        "| client processes' peak RSS MiB (sum) | of it for the nodes (above the start) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for job in jobs:
        n = job["n"]
        rows.append(
            f"| {n} | {job['processes']} | {job['wall_median_s']:.2f} | {job['wall_max_s']:.2f} "
            f"| {job['collector_accepted']} | {job['attempts']} | {job['probe_connects']} "
            f"| {job['probes_max']} | {job['probed_by_min']}-{job['probed_by_max']} "
            f"| {n * (n - 1)} | {job['collector_rss_mib']:.0f} | {job['client_rss_mib']:.0f} "
            f"| {job['client_rss_growth_mib']:.0f} |"
        )
    return "\n".join(rows) + (
        f"\n\n{rounds} rounds per size on loopback, every node its own 127.x.y.z; the collector's "
        "process also runs node 0's client and probe port; RSS is the peak (ru_maxrss), "
        "interpreter and imports included (about "
        f"{jobs[0]['collector_rss_ready_mib']:.0f} MiB per process before the first node)."
    )


def plot(jobs: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [j["n"] for j in jobs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    ax.plot(sizes, [j["wall_median_s"] for j in jobs], "o-", label="median")
    ax.plot(sizes, [j["wall_max_s"] for j in jobs], "x--", label="slowest round")
    ax.axhline(GOAL_SECONDS, color="grey", linestyle=":", label=f"goal {GOAL_SECONDS:g} s")
    ax.set(title="wall time to the verdict", xlabel="nodes", ylabel="s", ylim=(0, None))
    ax.legend()
    ax = axes[1]
    ax.plot(sizes, [j["probe_connects"] for j in jobs], "o-", label="probe connections")
    ax.plot(sizes, [j["collector_accepted"] for j in jobs], "s-", label="collector accepts")
    ax.plot(sizes, [n * (n - 1) for n in sizes], "k:", label="all pairs, N·(N-1)")
    ax.set(title="connections", xlabel="nodes", yscale="log")
    ax.legend()
    ax = axes[2]
    ax.plot(sizes, [j["collector_rss_mib"] for j in jobs], "o-", label="collector process")
    ax.plot(
        sizes,
        [j["client_rss_growth_mib"] for j in jobs],
        "s-",
        label="client processes above their start (sum)",
    )
    ax.axhline(GOAL_COLLECTOR_MIB, color="grey", linestyle=":", label="collector goal")
    ax.set(title="peak RSS", xlabel="nodes", ylabel="MiB", ylim=(0, None))
    ax.legend()
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dead-at", type=int, default=1024, help="0: no unreachable-node run")
    parser.add_argument("--plot", type=Path, help="write the PNG here")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    limit = raise_file_limit()
    per_process = max(1, (limit - 256) // FILES_PER_NODE)
    print(f"open files limit {limit}: up to {per_process} simulated nodes per client process")
    jobs = []
    failures = []
    for n in args.sizes:
        runs = []
        for k in range(args.rounds):
            job = run_job(n, per_process)
            failures += [f"{n} nodes, round {k + 1}: {p}" for p in check_ok(job)]
            print(
                f"{n} nodes, round {k + 1}: {job['wall_s']:.2f} s, {job['processes']} processes, "
                f"collector {job['collector_rss_mib']:.0f} MiB, {job['lines']}",
                flush=True,
            )
            runs.append(job)
        slowest = max(runs, key=lambda j: j["wall_s"])
        walls = [j["wall_s"] for j in runs]
        jobs.append(
            {
                **slowest,
                "wall_median_s": statistics.median(walls),
                "wall_max_s": max(walls),
                "collector_rss_mib": max(j["collector_rss_mib"] for j in runs),
                "client_rss_mib": max(j["client_rss_mib"] for j in runs),
                "client_rss_growth_mib": max(j["client_rss_growth_mib"] for j in runs),
            }
        )
    dead_text = ""
    if args.dead_at:
        n = args.dead_at
        dead = n // 2 + 7
        job = run_job(n, per_process, dead)
        line, problems = check_dead(job, dead)
        failures += [f"{n} nodes with {name(dead)} unreachable: {p}" for p in problems]
        probers = sorted(probers_of(n, dead))
        dead_text = (
            f"Correctness check, {n} nodes, {name(dead)}'s probe port closed "
            f"(its probers by the assignment: {', '.join(name(p) for p in probers)}); "
            f"every node got ({job['wall_s']:.2f} s):\n\n    {line}\n"
        )
        print(dead_text)
    text = table(jobs, args.rounds)
    if dead_text:
        text += "\n\n" + dead_text
    print(text)
    for job in jobs:
        n = job["n"]
        if n >= 4096 and job["wall_median_s"] > GOAL_SECONDS:
            print(f"goal missed: {n} nodes took {job['wall_median_s']:.1f} s")
        if job["collector_rss_mib"] > GOAL_COLLECTOR_MIB:
            print(f"goal missed: collector {job['collector_rss_mib']:.0f} MiB at {n} nodes")
    if failures:
        raise SystemExit("WRONG:\n" + "\n".join(failures))
    if args.plot or args.record:
        plot(jobs, args.plot or PLOT)
    if args.record:
        record("preflight-scale", text, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
