"""The preflight protocol for real on loopback: collector, clients, probes (sockets; each node
its own asyncio loop in a thread, or many simulated nodes with their own 127.x.y.z addresses
in one loop)."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import pytest

from torchrun_jsc import preflight
from torchrun_jsc.preflight import collector, wire
from torchrun_jsc.preflight.assign import probe_targets, probers_of
from torchrun_jsc.preflight.client import ClientOutcome, NodeConfig, run_client
from torchrun_jsc.preflight.report import NodeReport
from torchrun_jsc.preflight.wire import Channel

pytestmark = pytest.mark.integration

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
            "proto": wire.PROTOCOL,
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
    assert elapsed < collector.HELLO_TIMEOUT + 1, "no wait for the whole timeout"


def test_endpoint_port_zero_is_not_called_another_node() -> None:
    host = config("n0", 0, 0, True, expected=2, timeout=1.0)
    out = io.StringIO()
    assert preflight.run_node(host, out) == 1
    text = out.getvalue()
    assert "is not this node" not in text, text
    assert "n0 considers itself host, but no node joined its collector on port 0 within 1 s" in (
        text
    )
    assert "the endpoint's port is 0: no node can connect to it" in text
    assert "n0: nothing can accept at 127.0.0.1:0: port 0 cannot be connected to" in text


@pytest.mark.parametrize("timeout", [0.001, 0.05])
def test_tiny_timeout_is_not_called_another_node(timeout: float) -> None:
    port = free_port()
    out = io.StringIO()
    started = time.monotonic()
    assert preflight.run_node(config("n0", 0, port, True, expected=2, timeout=timeout), out) == 1
    text = out.getvalue()
    assert "is not this node" not in text, text
    assert "never reached the endpoint" in text or "no node joined its collector" in text, text
    assert time.monotonic() - started < 5


# --------------------------------------------------------------------------- many nodes


def address(i: int) -> str:
    """Simulated node i's own loopback address (Linux answers on all of 127.0.0.0/8)."""
    k = i + 1
    return f"127.{1 + k // 65536}.{(k // 256) % 256}.{k % 256}"


def simulate(n: int, dead: Optional[int] = None) -> Tuple[List[Any], int]:
    """n nodes (node rank i at address(i), node 0 the host) in one event loop; node ``dead``
    joins with a probe port where nothing listens. (results, endpoint port)."""
    port = free_port()

    def conf(i: int) -> NodeConfig:
        report = NodeReport(f"sim{i}", i, i == 0, address(i), None, "lo")
        endpoint = (address(0),)
        return NodeConfig(
            report, f"{address(0)}:{port}", endpoint, port, "7", n, 20.0, (), address(0), address(i)
        )

    async def dead_node(config: NodeConfig) -> ClientOutcome:
        with socket.socket() as s:  # bound, never listening: connecting is refused
            s.bind((address(dead or 0), 0))
            report = replace(config.report, probe_port=int(s.getsockname()[1]))
            return await run_client(replace(config, report=report), time.monotonic() + 20.0)

    async def main() -> List[Any]:
        jobs = [
            dead_node(conf(i)) if i == dead else preflight.run_node_async(conf(i)) for i in range(n)
        ]
        return list(await asyncio.gather(*jobs))

    return asyncio.run(main()), port


def test_64_nodes_probe_exactly_their_assignment() -> None:
    n = 64
    results, port = simulate(n)
    table = probe_targets(n)
    assert results[0].text.splitlines()[0] == f"preflight: endpoint {address(0)}:{port}, 64 nodes"
    assert results[0].text.splitlines()[-1] == "preflight: OK (64 nodes)"
    assert results[0].collector_accepted == n
    for i, r in enumerate(results):
        assert r.code == 0, r.text
        # ids are join order; the peer names say which ranks this node was given
        probed = sorted(int(r.client.peer_names[t][3:]) for t in r.client.targets)
        assert probed == sorted(table[i]), i
        assert r.probes_accepted == len(probers_of(n, i)) == 6, "probed by its probers only"


def test_dead_probe_port_names_the_node_and_its_probers() -> None:
    n, dead = 32, 9
    results, _ = simulate(n, dead)
    line = results[0].text.splitlines()[-1]
    probers = ", ".join(f"sim{p}" for p in sorted(probers_of(n, dead)))
    assert line.startswith(f"preflight: FAIL: sim{dead}: its address {address(dead)}:"), line
    assert f"is unreachable from every node that probed it: {probers} (Connection refused)" in line
    for i, r in enumerate(results):
        outcome = r if i == dead else r.client  # the dead node ran only a client
        assert outcome.line == line, i
        assert outcome.ok is False
