"""The preflight's pure part: expected nodes, verdict, table, the node's configuration.

The protocol itself runs on loopback in tests/integration/test_preflight_loopback.py."""

from __future__ import annotations

import errno
import socket
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from torchrun_jsc import preflight
from torchrun_jsc.plan import Prepared, make_plan
from torchrun_jsc.preflight.assign import assign_probes, probe_targets, probers_of
from torchrun_jsc.preflight.client import ClientOutcome, NodeConfig
from torchrun_jsc.preflight.report import (
    Member,
    NodeReport,
    Verdict,
    compute_verdict,
    expected_nodes,
    missing_names,
    no_collector_reason,
    render_table,
)

from .layouts import ib, node
from .planning import request

EP = "node0i:29500"

# --------------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("low", "high", "step", "expected"),
    [
        (4, 4, None, 4),
        (4, 4, 2, 4),  # fixed --nnodes wins: torch waits for 4
        (1, 4, None, 4),
        (2, 4, 3, 3),
        (2, 4, 8, 4),  # outside MIN..MAX: MAX
        (2, 4, 1, 4),
    ],
)
def test_expected_nodes(low: int, high: int, step: Optional[int], expected: int) -> None:
    assert expected_nodes(low, high, step) == expected


def rep(name: str, rank: Optional[int] = None, **kw: Any) -> NodeReport:
    return NodeReport(hostname=name, node_rank=rank, **kw)


@pytest.mark.parametrize(
    ("reports", "expected", "names", "missing"),
    [
        ([rep("n0", 0), rep("n1", 1)], 2, (), []),
        ([rep("n0", 0), rep("n1", 1)], 4, ("n0", "n1", "n2", "n3"), ["n2", "n3"]),
        ([rep("n0", 0), rep("n2", 2)], 3, (), ["node rank 1"]),
        ([rep("n0"), rep("n1")], 3, ("n0", "n1", "n2"), ["n2"]),
        ([rep("n0"), rep("n1")], 4, (), ["2 of 4 nodes"]),
        ([rep("n0", 0), rep("n0b", 0)], 3, (), ["1 of 3 nodes"]),  # duplicate ranks
        ([], 2, ("a", "b"), ["a", "b"]),
    ],
)
def test_missing_names(
    reports: List[NodeReport], expected: int, names: Tuple[str, ...], missing: List[str]
) -> None:
    assert missing_names(reports, expected, names) == missing


def member(
    i: int,
    host: bool = False,
    unreachable: Optional[Dict[int, str]] = None,
    name: Optional[str] = None,
    **kw: Any,
) -> Member:
    report = NodeReport(
        hostname=name or f"node{i}",
        node_rank=i,
        is_host=host,
        address=ib(i),
        probe_port=40000 + i,
        interface="ib",
        **kw,
    )
    return Member(i, report, {} if unreachable is None else unreachable)


FOUR = [member(0, True), member(1), member(2), member(3)]
CELL_B_CUT = [
    member(0, True, {2: "No route to host", 3: "timed out"}),
    member(1, False, {2: "No route to host", 3: "No route to host"}),
    member(2, False, {0: "timed out", 1: "timed out"}),
    member(3, False, {0: "timed out", 1: "timed out"}),
]


@pytest.mark.parametrize(
    ("members", "expected", "missing", "reasons"),
    [
        (FOUR, 4, [], []),
        (
            [member(2, True), member(1), member(0, True)],
            3,
            [],
            ["2 nodes consider themselves host: node0, node2"],
        ),
        ([member(0), member(1)], 2, [], ["no node that reached the collector considers"]),
        (
            FOUR[:2],
            4,
            ["node2", "node3"],
            [f"node2: never reached the endpoint {EP}", f"node3: never reached the endpoint {EP}"],
        ),
        (
            [member(0, True, failures=("the endpoint is not one of its addresses",)), member(1)],
            2,
            [],
            ["node0: the endpoint is not one of its addresses"],
        ),
        (
            [member(0, True), member(1, False, {2: "timed out"}), member(2)],
            3,
            [],
            ["node2: its address 10.78.0.12:40002 is unreachable from node1 (timed out)"],
        ),
        (
            [member(0, True, {2: "timed out"}), member(1, False, {2: "refused"}), member(2)],
            3,
            [],
            [
                "node2: its address 10.78.0.12:40002 is unreachable from every other node "
                "(refused, timed out)"
            ],
        ),
        (
            CELL_B_CUT,
            4,
            [],
            [
                "node0: its address 10.78.0.10:40000 is unreachable from node2, node3",
                "node1: its address 10.78.0.11:40001 is unreachable from node2, node3",
                "node2: its address 10.78.0.12:40002 is unreachable from node0, node1",
                "node3: its address 10.78.0.13:40003 is unreachable from node0, node1",
            ],
        ),
        (
            [
                member(0, True),
                Member(1, rep("node1", 1), None, "sent no probe results (timed out)"),
            ],
            2,
            [],
            ["node1: sent no probe results (timed out)"],
        ),
        (
            [member(0, True, name="gpu"), member(1, False, {0: "timed out"}, name="gpu")],
            2,
            [],
            ["gpu[rank 0]: its address 10.78.0.10:40000 is unreachable from gpu[rank 1]"],
        ),
        ([member(0, True, {9: "timed out"})], 1, [], ["node0: probe results for unknown nodes"]),
        (
            [member(0, True), member(1, name="a"), Member(2, rep("b", 1), {})],
            3,
            [],
            ["node rank 1 is claimed by 2 nodes: a, b"],
        ),
    ],
    ids=[
        "ok",
        "two-hosts",
        "no-host",
        "missing",
        "predicted-failure",
        "one-way",
        "from-everyone",
        "cells-cut",
        "no-probe-results",
        "same-hostname",
        "unknown-peer",
        "same-rank",
    ],
)
def test_compute_verdict(
    members: List[Member], expected: int, missing: List[str], reasons: List[str]
) -> None:
    verdict = compute_verdict(members, expected, missing, EP)
    assert verdict.ok == (not reasons)
    assert len(verdict.reasons) == len(reasons), verdict.reasons
    for got, want in zip(verdict.reasons, reasons):
        assert got.startswith(want), (got, want)
    if reasons:
        assert verdict.line.startswith("preflight: FAIL: " + reasons[0])
    else:
        assert verdict.line == f"preflight: OK ({expected} nodes)"


def test_warnings_do_not_fail() -> None:
    members = [member(0, True, warnings=("torch is newer than tested",)), member(1)]
    assert compute_verdict(members, 2, [], EP).ok


@pytest.mark.parametrize(
    ("verdict", "line"),
    [
        (Verdict(True, 1), "preflight: OK (1 node)"),
        (Verdict(True, 16), "preflight: OK (16 nodes)"),
        (Verdict(False, 2, ("a: x", "b: y")), "preflight: FAIL: a: x; b: y"),
    ],
)
def test_verdict_line(verdict: Verdict, line: str) -> None:
    assert verdict.line == line


def test_render_table() -> None:
    members = [
        member(2, False, {0: "timed out"}),
        member(0, True, warnings=("w!",)),
        Member(1, rep("node1", 1, is_host=None), None, "sent no probe results (timed out)"),
    ]
    text = render_table(members, ["node3"], EP, 4)
    lines = text.splitlines()
    assert lines[0] == f"preflight: endpoint {EP}, 4 nodes expected, 3 joined"
    assert lines[1].split() == [
        "node",
        "rank",
        "host",
        "address",
        "iface",
        "endpoint",
        "peers",
        "unreachable",
    ]
    rows = [ln.split() for ln in lines[2:6]]
    assert [r[0] for r in rows] == ["node0", "node1", "node2", "node3"]
    assert rows[0][:7] == ["node0", "0", "yes", ib(0), "ib", "reached", "none"]
    assert rows[1][:6] == ["node1", "1", "?", "-", "-", "reached"] and "?" in rows[1][6]
    assert rows[2][6] == "node0"
    assert rows[3][:6] == ["node3", "-", "-", "-", "-", "NOT"]
    assert "  node0: warning: w!" in lines
    assert "  node1: sent no probe results (timed out)" in lines


def test_header_counts_the_expected_nodes() -> None:
    """Not joined + missing entries: "2 of 3 nodes" is one entry but two nodes."""
    one = [member(0, True)]
    assert render_table(one, [], EP, 1).splitlines()[0] == f"preflight: endpoint {EP}, 1 node"
    unnamed = [Member(0, rep("n0", None, is_host=True), {})]
    missing = missing_names([m.report for m in unnamed], 3)
    assert missing == ["2 of 3 nodes"]
    header = render_table(unnamed, missing, EP, 3).splitlines()[0]
    assert header == f"preflight: endpoint {EP}, 3 nodes expected, 1 joined"


def test_nnodes_range_header() -> None:
    """--nnodes=1:3 outside Slurm waits for 3 nodes and says so, not "2 nodes"."""
    expected = expected_nodes(1, 3, None)
    missing = missing_names([member(0).report], expected)
    assert missing == ["node rank 1", "node rank 2"]
    text = render_table([member(0, True)], missing, EP, expected)
    assert text.splitlines()[0] == f"preflight: endpoint {EP}, 3 nodes expected, 1 joined"


def test_absurd_node_count_is_cheap_and_bounded() -> None:
    """--nnodes=100000000: names a few ranks, counts the rest; short verdict line."""
    expected = 100_000_000
    joined = [member(0, True)]
    missing = missing_names([m.report for m in joined], expected, ("node0", "node1"))
    assert missing[:3] == ["node1", "node rank 2", "node rank 3"]
    assert len(missing) == 2 + 16
    assert missing[-1] == "99999982 more of 100000000 nodes"
    header = render_table(joined, missing, EP, expected).splitlines()[0]
    assert header == f"preflight: endpoint {EP}, 100000000 nodes expected, 1 joined"
    verdict = compute_verdict(joined, expected, missing, EP)
    assert verdict.nodes == expected
    assert verdict.reasons == (
        f"99999999 of 100000000 nodes never reached the endpoint {EP}: node1, node rank 2, "
        "node rank 3, node rank 4, node rank 5, node rank 6, node rank 7, node rank 8, …",
    )


def test_missing_ranks_beyond_the_node_list() -> None:
    reports = [rep("a", 0), rep("c", 2)]
    assert missing_names(reports, 5, ("a", "b", "c")) == ["b", "node rank 3", "node rank 4"]
    assert missing_names([rep("a", 7)], 3) == ["2 of 3 nodes"], "a rank outside the range"


def ring(n: int, failed: Dict[int, Dict[int, str]]) -> List[Member]:
    """n members (id = rank) with the assignment's targets; ``failed``: prober -> errors."""
    members = [member(i, i == 0) for i in range(n)]
    assignment = assign_probes(members)
    return [replace(m, targets=assignment[m.id], unreachable=failed.get(m.id, {})) for m in members]


def test_partial_probing_names_pairs_and_all_probers() -> None:
    n = 10
    dead = 4  # its probe port closed: every node that probes it fails
    probers = sorted(probers_of(n, dead))
    failed: Dict[int, Dict[int, str]] = {p: {dead: "Connection refused"} for p in probers}
    lone = 8  # one broken pair: 8 (not a prober of 4) cannot reach its first target
    first = probe_targets(n)[lone][0]
    failed.setdefault(lone, {})[first] = "timed out"
    members = ring(n, failed)
    assert all(dead in (m.targets or ()) for m in members if m.id in probers)
    verdict = compute_verdict(members, n, [], EP)
    names = ", ".join(f"node{p}" for p in probers)
    assert verdict.reasons == (
        f"node{dead}: its address {ib(dead)}:{40000 + dead} is unreachable from every node "
        f"that probed it: {names} (Connection refused)",
        f"node{first}: its address {ib(first)}:{40000 + first} is unreachable from node{lone} "
        "(timed out)",
    )
    table = render_table(members, [], EP, n).splitlines()
    assert table[0] == f"preflight: endpoint {EP}, 10 nodes"
    assert table[2 + lone].split()[6:] == [f"node{first}"]


def test_probers_without_results_do_not_count() -> None:
    n = 12
    dead = 5
    probers = sorted(probers_of(n, dead))
    silent = probers[0]
    failed: Dict[int, Dict[int, str]] = {p: {dead: "No route to host"} for p in probers[1:]}
    members = ring(n, failed)
    members[silent] = replace(members[silent], unreachable=None, problem="sent no probe results")
    reasons = compute_verdict(members, n, [], EP).reasons
    assert reasons[-1] == (
        f"node{dead}: its address {ib(dead)}:{40000 + dead} is unreachable from every node that "
        f"probed it: {', '.join(f'node{p}' for p in probers[1:])} (No route to host)"
    )


def test_large_job_verdict_is_quick_and_bounded() -> None:
    n = 5000
    members = ring(n, {k: {(k + 1) % n: "timed out"} for k in range(0, n, 2)})
    members = [replace(m, report=replace(m.report, is_host=True)) for m in members]
    started = time.monotonic()
    verdict = compute_verdict(members, n + 10, [f"x{k}" for k in range(10)], EP)
    render_table(members, [], EP, n + 10)
    assert time.monotonic() - started < 10, "linear in the nodes, not quadratic"
    assert verdict.reasons[0].startswith(
        "5000 nodes consider themselves host: node0, node1, node2, node3, node4, node5, node6, "
        "node7 and 4992 more"
    )
    assert verdict.truncated and len(verdict.reasons) == 2 + n // 2
    assert verdict.line.endswith("; and 2482 more problems (the host lists them all)")
    assert len(verdict.line) < 4000


@pytest.mark.parametrize(
    ("answered", "hellos", "port", "words", "not_words"),
    [
        (True, 0, 29500, ["got no connection", "is not this node"], ["no node joined"]),
        (False, 0, 29500, ["no node joined its collector on port 29500 within 20 s"], ["not this"]),
        (True, 1, 29500, ["no node joined"], ["is not this node"]),  # refused late, own hello
        (False, 0, 0, ["on port 0 within 20 s", "port is 0: no node can connect"], ["not this"]),
    ],
)
def test_host_without_joins(
    answered: bool, hellos: int, port: int, words: List[str], not_words: List[str]
) -> None:
    config = NodeConfig(rep("node0", 0, is_host=True), f"node0i:{port}", (ib(0),), port, "7", 2, 20)
    client = ClientOutcome(reached=answered, answered=answered)
    text = preflight._no_join(config, config.report, client, SimpleNamespace(hellos=hellos))
    assert text.startswith("node0 considers itself host, but ")
    assert all(w in text for w in words), text
    assert not any(w in text for w in not_words), text


def test_report_json_round_trip() -> None:
    report = NodeReport("node0", 0, True, "fd00:78::a", 123, "ib", ("w",), ("f",))
    assert NodeReport.from_json(report.to_json()) == report
    assert NodeReport.from_json({"hostname": "x"}) == NodeReport("x")


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {},
        {"hostname": 3},
        {"hostname": "x", "node_rank": "0"},
        {"hostname": "x", "node_rank": True},
        {"hostname": "x", "is_host": 1},
        {"hostname": "x", "probe_port": 1.5},
        {"hostname": "x", "warnings": "w"},
        {"hostname": "x", "failures": [1]},
    ],
)
def test_report_json_rejects(data: object) -> None:
    with pytest.raises(ValueError):
        NodeReport.from_json(data)


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            ["nothing listens there", "(Connection refused)"],
        ),
        (
            OSError(errno.EHOSTUNREACH, "No route to host"),
            ["unreachable from this node", "(No route to host)"],
        ),
        (socket.timeout("timed out"), ["unreachable from this node", "(timed out)"]),
        (None, ["(no address to try)"]),
    ],
)
def test_no_collector_reason(exc: Optional[BaseException], words: List[str]) -> None:
    text = no_collector_reason(EP, 20, exc)
    assert text.startswith(f"no node accepted at {EP} within 20 s: ")
    for word in words:
        assert word in text


# --------------------------------------------------------------------------- node_config


def prepared_for(argv: List[str], env: Mapping[str, str], i: int = 0) -> Prepared:
    facts = node(i)
    req = request(argv, env)
    return Prepared(req, facts, make_plan(req, "2.6.0", facts))


JSC = ["--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_id=7", "--rdzv_endpoint=node0i", "t.py"]


def test_node_config_from_plan() -> None:
    env = {
        "SLURM_JOB_ID": "5",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_STEP_NODELIST": "node[0-2]",
    }
    config = preflight.node_config(prepared_for(JSC, env, 1))
    assert config.port == 29400, "torch's default c10d port"
    assert config.expected == 3
    assert config.rdzv_id == "7"
    assert config.names_by_rank == ("node0", "node1", "node2")
    assert config.endpoint_addresses == (ib(0),)
    assert config.report == NodeReport("node1", 1, False, ib(1), None, "ib")


def test_node_config_names_only_with_slurm_ranks() -> None:
    env = {"TORCHRUN_JSC_NODE_RANK": "0", "SLURM_STEP_NODELIST": "node[0-2]"}
    config = preflight.node_config(prepared_for(JSC, env))
    assert config.names_by_rank == ()
    assert config.report.is_host is True


@pytest.mark.parametrize(
    "argv",
    [
        ["--standalone", "--nproc_per_node=2", "t.py"],
        ["--nnodes=2", "--rdzv_backend=static", "t.py"],
        ["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:1", "t.py"],
    ],
)
def test_nothing_to_check(argv: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.run_preflight(prepared_for(argv, {})) == 0
    assert capsys.readouterr().out.startswith("preflight: OK: nothing to check across nodes")
