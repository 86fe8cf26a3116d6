"""Benchmark: a whole multi-node launch on the namespace cluster, torchrun_jsc vs a hand-fixed
torchrun, at 4, 8 and 16 nodes.

Per size, paired rounds (alternating order): time from `srun` to its exit, and the peak of the
summed PSS of every process in the cluster's namespaces (sampled every 0.25 s); a round in which
torchrun_jsc declared a node lost stops the benchmark. Needs root.
Prints the figures; with --record writes them into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.cluster.harness import Cluster, free_prefix  # noqa: E402
from tests.cluster.scenarios import TRAIN, on_each_node, parse_results  # noqa: E402

from record import record  # noqa: E402

#: What torchrun_jsc prints when it declares a node or the rendezvous host lost: a healthy launch
#: must never show it (the job watch must not cry wolf).
FALSE_ALARMS = ("has not been heard from", "has not answered for")


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class PeakMemory:
    """Samples the summed PSS of the cluster's processes in a thread."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.peak, self._stop = cluster, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(pss_kib(p) for p in self.cluster.pids()))
            self._stop.wait(0.25)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def argv_for(cluster: Cluster, kind: str, nodes: int) -> Tuple[List[str], Dict[str, str]]:
    common = [
        f"--nnodes={nodes}",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        "--rdzv_id=1",
        "--rdzv_endpoint=node0i:29500",
    ]
    if kind == "torchrun_jsc":
        return [
            str(cluster.python),
            "-m",
            "torchrun_jsc",
            *common,
            "--rdzv_conf=join_timeout=300,read_timeout=300",
            str(TRAIN),
        ], {}
    argv = [
        str(cluster.python),
        "-m",
        "torch.distributed.run",
        *common,
        "--rdzv_conf=is_host=@IS_FIRST@,join_timeout=300,read_timeout=300",
        "--local_addr=@HOSTNAME@i",
        str(TRAIN),
    ]
    return on_each_node(argv), {"GLOO_SOCKET_IFNAME": "ib", "NCCL_SOCKET_IFNAME": "ib"}


def one(cluster: Cluster, kind: str, nodes: int) -> Tuple[float, int]:
    argv, env = argv_for(cluster, kind, nodes)
    with PeakMemory(cluster) as mem:
        t0 = time.perf_counter()
        r = cluster.srun(argv, env=env, timeout=900)
        wall = time.perf_counter() - t0
    results = parse_results(r.output)
    if r.returncode != 0 or len(results) != nodes or not all(x.ok for x in results):
        raise SystemExit(f"{kind} on {nodes} nodes failed:\n{r.output[-3000:]}")
    if any(alarm in r.output for alarm in FALSE_ALARMS):
        raise SystemExit(f"{kind} on {nodes} nodes declared a node lost:\n{r.output[-3000:]}")
    return wall, mem.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,8,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true")
    parser.add_argument(
        "--section",
        default="cluster-launch",
        help="section of docs/benchmarks.md that --record replaces",
    )
    args = parser.parse_args()
    rows = [
        "| nodes | torchrun (hand-fixed) median s | torchrun_jsc median s "
        "| median paired ratio | peak PSS hand-fixed MiB | peak PSS torchrun_jsc MiB "
        "| PSS ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for nodes in (int(n) for n in args.sizes.split(",")):
        with Cluster(nodes=nodes, prefix=free_prefix("trjb"), python=Path(sys.executable)) as c:
            one(c, "torchrun_jsc", nodes)  # warm caches
            wall: Dict[str, List[float]] = {"hand": [], "torchrun_jsc": []}
            mem: Dict[str, List[int]] = {"hand": [], "torchrun_jsc": []}
            for i in range(args.rounds):
                order = ["hand", "torchrun_jsc"] if i % 2 == 0 else ["torchrun_jsc", "hand"]
                for kind in order:
                    w, m = one(c, kind, nodes)
                    wall[kind].append(w)
                    mem[kind].append(m)
                    print(f"{nodes} nodes {kind}: {w:.1f} s, peak {m / 1024:.0f} MiB", flush=True)
        ratio = statistics.median(a / b for a, b in zip(wall["torchrun_jsc"], wall["hand"]))
        mh, mj = statistics.median(mem["hand"]), statistics.median(mem["torchrun_jsc"])
        rows.append(
            f"| {nodes} | {statistics.median(wall['hand']):.1f} | "
            f"{statistics.median(wall['torchrun_jsc']):.1f} | {ratio:.3f} | "
            f"{mh / 1024:.0f} | {mj / 1024:.0f} | {mj / mh:.3f} |"
        )
    table = "\n".join(rows) + f"\n\n{args.rounds} paired rounds per size, order alternating."
    print(table)
    if args.record:
        record(args.section, table, ROOT / "docs" / "benchmarks.md")


if __name__ == "__main__":
    main()
