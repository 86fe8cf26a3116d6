"""The preflight: pure tables (expected nodes, verdict, table) and the protocol on loopback."""

from __future__ import annotations

import errno
import io
import socket
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

from torchrun_jsc import preflight
from torchrun_jsc.apply import Prepared
from torchrun_jsc.plan import make_plan
from torchrun_jsc.preflight import (
    Channel,
    Member,
    NodeConfig,
    NodeReport,
    Verdict,
    compute_verdict,
    expected_nodes,
    missing_names,
    no_collector_reason,
    render_table,
)
from torchrun_jsc.settings import Settings

from .layouts import ib, node

EP = "node0i:29500"

# --------------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("nnodes", "env", "expected"),
    [
        ("4", {}, 4),
        ("4", {"SLURM_STEP_NUM_NODES": "2"}, 4),  # fixed --nnodes wins: torch waits for 4
        ("1:4", {}, 4),
        ("2:4", {"SLURM_STEP_NUM_NODES": "3", "SLURM_NNODES": "4"}, 3),
        ("2:4", {"SLURM_NNODES": "3"}, 3),
        ("2:4", {"SLURM_NNODES": "8"}, 4),  # outside MIN..MAX: MAX
        ("2:4", {"SLURM_NNODES": ""}, 4),
        ("x", {"SLURM_NNODES": "5"}, 5),
        ("x", {}, 1),
        ("0", {}, 1),
    ],
)
def test_expected_nodes(nnodes: str, env: Dict[str, str], expected: int) -> None:
    assert expected_nodes(nnodes, env) == expected


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
    text = render_table(members, ["node3"], EP)
    lines = text.splitlines()
    assert lines[0] == f"preflight: endpoint {EP}, 4 nodes"
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
    return Prepared(Settings.from_env(env), facts, make_plan(argv, env, "2.6.0", facts))


JSC = ["--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_id=7", "--rdzv_endpoint=node0i", "t.py"]


def test_node_config_from_plan() -> None:
    env = {"SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NODELIST": "node[0-2]"}
    config = preflight.node_config(prepared_for(JSC, env, 1), JSC, env)
    assert config.port == 29400, "torch's default c10d port"
    assert config.expected == 3
    assert config.rdzv_id == "7"
    assert config.names_by_rank == ("node0", "node1", "node2")
    assert config.endpoint_addresses == (ib(0),)
    assert config.report == NodeReport("node1", 1, False, ib(1), None, "ib")


def test_node_config_names_only_with_slurm_ranks() -> None:
    env = {"TORCHRUN_JSC_NODE_RANK": "0", "SLURM_STEP_NODELIST": "node[0-2]"}
    config = preflight.node_config(prepared_for(JSC, env), JSC, env)
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
    assert preflight.run_preflight(prepared_for(argv, {}), argv, {}) == 0
    assert capsys.readouterr().out.startswith("preflight: OK: nothing to check across nodes")


# --------------------------------------------------------------------------- loopback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(
    name: str,
    rank: Optional[int],
    port: int,
    host: bool = False,
    expected: int = 3,
    timeout: float = 5.0,
    **kw: Any,
) -> NodeConfig:
    report = NodeReport(name, rank, host, "127.0.0.1", None, "lo")
    return NodeConfig(
        report, f"127.0.0.1:{port}", ("127.0.0.1",), port, "7", expected, timeout, **kw
    )


def run_all(configs: List[NodeConfig]) -> Tuple[List[int], List[str], float]:
    """Run every node in its own thread; (exit codes, outputs, seconds)."""
    codes: List[int] = [-1] * len(configs)
    outs = [io.StringIO() for _ in configs]

    def one(k: int) -> None:
        codes[k] = preflight.run_node(configs[k], outs[k])

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(configs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return codes, [o.getvalue() for o in outs], time.monotonic() - started


def test_three_nodes_ok() -> None:
    port = free_port()
    codes, outs, seconds = run_all(
        [config("n1", 1, port), config("n0", 0, port, host=True), config("n2", 2, port)]
    )
    assert codes == [0, 0, 0], outs
    table = outs[1].splitlines()
    assert table[0] == f"preflight: endpoint 127.0.0.1:{port}, 3 nodes"
    assert [ln.split()[0] for ln in table[2:5]] == ["n0", "n1", "n2"]
    assert table[-1] == "preflight: OK (3 nodes)"
    for out in (outs[0], outs[2]):
        assert "reached, peers unreachable: none" in out
        assert out.splitlines()[-1] == "job verdict: preflight: OK (3 nodes)"
    assert seconds < 4, "no waiting once every node joined"


def test_missing_node_is_named_and_time_is_bounded() -> None:
    port = free_port()
    names = ("n0", "n1", "n2")
    codes, outs, seconds = run_all(
        [config("n0", 0, port, True, timeout=1.5, names_by_rank=names), config("n1", 1, port)]
    )
    assert codes == [1, 1], outs
    verdict = f"preflight: FAIL: n2: never reached the endpoint 127.0.0.1:{port}"
    assert outs[0].splitlines()[-1] == verdict
    assert outs[1].splitlines()[-1] == "job verdict: " + verdict
    assert 1.5 <= seconds < 1.5 + 3


def test_no_host_every_node_fails_in_time() -> None:
    port = free_port()
    codes, outs, seconds = run_all([config(f"n{i}", i, port, timeout=1.5) for i in range(2)])
    assert codes == [1, 1]
    for i, out in enumerate(outs):
        assert f"endpoint 127.0.0.1:{port} NOT reached, peers unreachable: not probed" in out
        assert out.splitlines()[-1].startswith(
            f"preflight: FAIL: n{i}: no node accepted at 127.0.0.1:{port} within 1.5 s: "
            "nothing listens there"
        )
        assert "(Connection refused)" in out
    assert seconds < 1.5 + 1.5


def test_self_declared_host_elsewhere_says_its_listener_got_nothing() -> None:
    port = free_port()
    real = config("n0", 0, port, True, expected=2, listen_address="127.0.0.1")
    wrong = config("n1", 1, port, True, expected=2, listen_address="127.0.0.3")
    codes, outs, _ = run_all([real, wrong])
    assert codes == [1, 1], outs
    assert "FAIL: 2 nodes consider themselves host: n0, n1" in outs[0]
    assert "job verdict: preflight: FAIL: 2 nodes consider themselves host: n0, n1" in outs[1]
    assert (
        f"n1: n1 considers itself host, but its listener on port {port} got no connection"
        in (outs[1])
    )


class FakeNode:
    """A node speaking the protocol by hand on loopback."""

    def __init__(self, port: int, report: NodeReport, rdzv_id: str = "7") -> None:
        self.channel = Channel(socket.create_connection(("127.0.0.1", port), timeout=5))
        hello = {
            "type": "hello",
            "proto": preflight.PROTOCOL,
            "rdzv_id": rdzv_id,
            "report": report.to_json(),
        }
        self.channel.send(hello, time.monotonic() + 5)
        self.answer = self.channel.recv(time.monotonic() + 5)

    def probe_and_wait(self, unreachable: Dict[int, str]) -> Dict[str, Any]:
        peers = self.channel.recv(time.monotonic() + 10)
        assert peers["type"] == "peers" and peers["you"] == self.answer["id"]
        self.channel.send({"type": "probes", "unreachable": unreachable}, time.monotonic() + 5)
        return self.channel.recv(time.monotonic() + 10)


def closed_port() -> int:
    return free_port()  # bound and closed again: connecting is refused


def test_fake_reports_two_hosts_unreachable_peer_and_silent_node() -> None:
    port = free_port()
    host = config("n0", 0, port, True, expected=4, timeout=8)
    verdicts: List[Dict[str, Any]] = []
    codes, outs = [-1], [io.StringIO()]

    def real() -> None:
        codes[0] = preflight.run_node(host, outs[0])

    thread = threading.Thread(target=real)
    thread.start()
    time.sleep(0.3)
    bad = NodeReport("n1", 1, True, "127.0.0.1", closed_port(), "lo")
    fake = FakeNode(port, bad)
    silent = FakeNode(port, NodeReport("n2", 2, False, None, None, None, (), ("no route",)))
    third = FakeNode(port, NodeReport("n3", 3, False, "127.0.0.1", closed_port(), "lo"))
    silent.channel.close()  # joins, then vanishes before the probes
    ids = [fake.answer["id"], third.answer["id"]]
    assert fake.answer["expected"] == 4
    t3 = threading.Thread(target=lambda: verdicts.append(third.probe_and_wait({})))
    t3.start()
    verdicts.append(fake.probe_and_wait({ids[1]: "timed out"}))
    t3.join(15)
    thread.join(30)
    assert codes == [1], outs[0].getvalue()
    line = outs[0].getvalue().splitlines()[-1]
    assert line.startswith("preflight: FAIL: 2 nodes consider themselves host: n0, n1; ")
    assert "n1: its address 127.0.0.1:" in line  # n0 probed n1's closed port
    assert "(Connection refused)" in line
    assert "n2: no route" in line
    assert "n2: lost before probing" in line or "n2: sent no probe results" in line
    assert "n3: its address 127.0.0.1:" in line and "timed out" in line
    assert [v["line"] for v in verdicts] == [line, line]
    assert all(v["ok"] is False for v in verdicts)


def test_wrong_rdzv_id_is_refused() -> None:
    port = free_port()
    host = config("n0", 0, port, True, expected=2, timeout=2)
    out = io.StringIO()
    thread = threading.Thread(target=preflight.run_node, args=(host, out))
    thread.start()
    time.sleep(0.3)
    fake = FakeNode(port, NodeReport("x"), rdzv_id="other")
    thread.join(10)
    assert fake.answer["type"] == "reject"
    assert "serves rdzv_id '7', not 'other'" in fake.answer["message"]
    last = out.getvalue().splitlines()[-1]
    assert last == f"preflight: FAIL: node rank 1: never reached the endpoint 127.0.0.1:{port}"


def test_garbage_hello_is_ignored() -> None:
    port = free_port()
    host = config("n0", 0, port, True, expected=2, timeout=5)
    out = io.StringIO()
    thread = threading.Thread(target=preflight.run_node, args=(host, out))
    thread.start()
    time.sleep(0.3)  # the collector now waits for n1
    with socket.create_connection(("127.0.0.1", port), timeout=2) as junk:
        junk.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert junk.recv(100) == b"", "the collector hangs up on a stranger"
    other = io.StringIO()
    assert preflight.run_node(config("n1", 1, port), other) == 0, other.getvalue()
    thread.join(10)
    assert out.getvalue().splitlines()[-1] == "preflight: OK (2 nodes)"


def test_foreign_server_on_the_port() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])
    accepted: List[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    out = io.StringIO()
    started = time.monotonic()
    code = preflight.run_node(config("n1", 1, port, timeout=20), out)
    elapsed = time.monotonic() - started
    server.close()
    for s in accepted:
        s.close()
    assert code == 1
    assert "did not answer as a torchrun_jsc preflight collector" in out.getvalue()
    assert elapsed < preflight.HELLO_TIMEOUT + 1, "no wait for the whole timeout"
