"""``TORCHRUN_JSC_PREFLIGHT=1`` on the namespace cluster: one good job, three broken ones.

Nothing is ever trained: no TRJSC_RESULT line may appear. Failing scenarios use a 10 s
preflight timeout and must end within it plus start-up and a few seconds.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional

import pytest

from tests.cluster.harness import Cluster, Result
from tests.cluster.scenarios import TRAIN, all_text, describe, outputs_by_node, parse_results

pytestmark = pytest.mark.cluster

FAST = {"TORCHRUN_JSC_PREFLIGHT": "1", "TORCHRUN_JSC_PREFLIGHT_TIMEOUT": "10"}
#: Preflight timeout + interpreter/torch start-up under load + the protocol's grace.
BOUND = 10 + 20


def jsc(cluster: Cluster, endpoint: str = "node0i:29500") -> List[str]:
    return [
        str(cluster.python),
        "-m",
        "torchrun_jsc",
        "--nnodes=4",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        "--rdzv_id=7",
        f"--rdzv_endpoint={endpoint}",
        "--rdzv_conf=join_timeout=60,read_timeout=60",
        str(TRAIN),
    ]


def lines_of(text: str) -> List[str]:
    return [ln.rstrip() for ln in text.splitlines()]


def verdict_lines(text: str) -> List[str]:
    return [ln for ln in lines_of(text) if re.match(r"^preflight: (OK|FAIL)\b", ln)]


def test_good_job_ok_in_seconds(jsc_cluster: Cluster) -> None:
    r = jsc_cluster.srun(jsc(jsc_cluster), env={"TORCHRUN_JSC_PREFLIGHT": "1"}, timeout=60)
    ctx = "\n" + describe(r)
    assert r.returncode == 0 and not r.timed_out, ctx
    # no node waited into its deadline (TORCHRUN_JSC_PREFLIGHT_TIMEOUT, 20 s): each node's own
    # check time, printed after start-up, stays far below it
    waits = [float(w) for w in re.findall(r"peers unreachable: none \(([0-9.]+) s\)", r.stdout)]
    assert len(waits) == 3 and max(waits) < 20, f"{waits}{ctx}"
    assert not parse_results(all_text(r)), "nothing may be trained" + ctx
    by_task = outputs_by_node(r)
    host = lines_of(by_task["task0"])
    assert verdict_lines(by_task["task0"]) == ["preflight: OK (4 nodes)"], ctx
    start = host.index("preflight: endpoint node0i:29500, 4 nodes")
    rows = [ln.split() for ln in host[start + 2 : start + 6]]
    assert [row[0] for row in rows] == ["node0", "node1", "node2", "node3"], ctx
    assert [row[1:6] for row in rows] == [
        [str(i), "yes" if i == 0 else "no", jsc_cluster.ib_ip(i), "ib", "reached"] for i in range(4)
    ], ctx
    assert all(row[6] == "none" for row in rows), ctx
    for task in ("task1", "task2", "task3"):
        assert "job verdict: preflight: OK (4 nodes)" in by_task[task], ctx


def test_good_job_with_slurm_auto_configuration(main_cluster: Cluster) -> None:
    """The README's shortest script: the preflight checks the auto-configured endpoint."""
    argv = [str(main_cluster.python), "-m", "torchrun_jsc", str(TRAIN)]
    env = {
        "TORCHRUN_JSC_PREFLIGHT": "1",
        "TORCHRUN_JSC_SLURM_AUTO": "1",
        "TORCHRUN_JSC_HOST_SUFFIX": "i",
    }
    r = main_cluster.srun(argv, env=env, timeout=60)
    ctx = "\n" + describe(r)
    assert r.returncode == 0 and not r.timed_out, ctx
    by_task = outputs_by_node(r)
    assert verdict_lines(by_task["task0"]) == ["preflight: OK (4 nodes)"], ctx
    assert re.search(r"preflight: endpoint node0i:\d+, 4 nodes", by_task["task0"]), ctx
    assert not parse_results(all_text(r)), ctx


def test_mgmt_endpoint_cell_b_named(main_cluster: Cluster) -> None:
    r = main_cluster.srun(jsc(main_cluster, endpoint="node0:29500"), env=FAST, timeout=90)
    ctx = "\n" + describe(r)
    assert r.returncode != 0 and not r.timed_out, ctx
    assert r.elapsed < BOUND, f"{r.elapsed:.1f} s{ctx}"
    by_task = outputs_by_node(r)
    [verdict] = verdict_lines(by_task["task0"])
    assert verdict.startswith("preflight: FAIL: "), ctx
    for name in ("node2", "node3"):
        assert f"{name}: never reached the endpoint node0:29500" in verdict, ctx
    assert "node1: never" not in verdict, ctx
    for task, name in (("task2", "node2"), ("task3", "node3")):
        text = by_task[task]
        assert f"preflight: FAIL: {name}: no node accepted at node0:29500 within 10 s" in text, ctx
        assert "No route to host" in text or "timed out" in text, ctx
    assert "job verdict: " + verdict in by_task["task1"], ctx
    assert not parse_results(all_text(r)), ctx


def run_nodes(
    cluster: Cluster, envs: List[Dict[str, str]], nodes: Optional[List[int]] = None
) -> List[Result]:
    argv = jsc(cluster)
    return cluster.run_on_nodes(
        [argv] * len(envs), [{**FAST, **e} for e in envs], timeout=90, nodes=nodes
    )


def test_two_hosts_named(main_cluster: Cluster) -> None:
    envs = [
        {"TORCHRUN_JSC_NODE_RANK": str(i), "TORCHRUN_JSC_HOST_NODE_RANK": "2" if i == 2 else "0"}
        for i in range(4)
    ]
    results = run_nodes(main_cluster, envs)
    ctx = "\n" + describe(results)
    assert [r.returncode for r in results] == [1, 1, 1, 1], ctx
    assert not any(r.timed_out for r in results), ctx
    assert results[0].elapsed < BOUND, ctx
    [verdict] = verdict_lines(results[0].output)
    assert verdict.startswith("preflight: FAIL: 2 nodes consider themselves host: node0, node2"), (
        ctx
    )
    assert "node2: this node would host the rendezvous store" in verdict, ctx
    for r in results[1:]:
        assert "job verdict: " + verdict in r.output, ctx
    assert (
        "node2 considers itself host, but its listener on port 29500 got no connection"
        in results[2].output
    ), ctx


def test_host_missing_every_node_fails_in_time(main_cluster: Cluster) -> None:
    envs = [{"TORCHRUN_JSC_NODE_RANK": str(i)} for i in (1, 2, 3)]
    results = run_nodes(main_cluster, envs, nodes=[1, 2, 3])
    ctx = "\n" + describe(results)
    assert [r.returncode for r in results] == [1, 1, 1], ctx
    assert not any(r.timed_out for r in results), ctx
    assert results[0].elapsed < BOUND, f"{results[0].elapsed:.1f} s{ctx}"
    for i, r in zip((1, 2, 3), results):
        [verdict] = verdict_lines(r.output)
        assert verdict.startswith(
            f"preflight: FAIL: node{i}: no node accepted at node0i:29500 within 10 s: "
            "nothing listens there: no node considers itself host"
        ), ctx
        assert verdict.endswith("(Connection refused)"), ctx
        assert "RendezvousConnectionError" not in r.output, "torchrun never starts" + ctx
