"""Issue 31, items 10, 12 and 13 on this machine's loopback: port 0 for two nodes is refused,
and a stop while a node waits for its rendezvous host (or in the launch's first second) is one
line, at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from tests.unit.procs import stop_signals_default

pytestmark = pytest.mark.integration

TRAIN = Path(__file__).resolve().parents[1] / "cluster" / "jobs" / "train.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent(endpoint: str, conf: str) -> List[str]:
    return [
        sys.executable,
        "-m",
        "torchrun_jsc",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_conf={conf}",
        str(TRAIN),
    ]


def start(argv: List[str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "SLURM_"))}
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=stop_signals_default,
    )


def test_port_zero_for_two_agents_is_refused_at_once() -> None:
    procs = [start(agent("127.0.0.1:0", f"is_host={h}")) for h in (1, 0)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert len(err.strip().splitlines()) == 1 and "port 0" in err, err


@pytest.mark.parametrize(
    ("sig", "code", "line"),
    [
        ("SIGTERM", 1, "torchrun_jsc: stopped by SIGTERM; no worker had started"),
        ("SIGHUP", 1, "torchrun_jsc: stopped by SIGHUP; no worker had started"),
        ("SIGINT", 130, "torchrun_jsc: interrupted before the launch; nothing was started"),
    ],
)
def test_a_stop_while_waiting_for_the_host_is_one_line_at_once(
    sig: str, code: int, line: str
) -> None:
    proc = start(agent(f"127.0.0.1:{free_port()}", "is_host=0"))
    time.sleep(6)  # torch imported, connecting to a host that is not there
    sent = time.monotonic()
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 3, "at once"
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [line], err


def handles(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` in ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.parametrize("after", [0.0, 0.25, 0.5, 1.0])
def test_sigterm_in_the_first_second_is_one_line(after: float) -> None:
    """``after`` seconds after torchrun_jsc's own handler is in place (before it, python is
    still starting: the signal's default action is all there is)."""
    proc = start(agent(f"127.0.0.1:{free_port()}", "is_host=0"))
    deadline = time.monotonic() + 30
    while not handles(proc.pid, signal.SIGTERM):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert err.strip().splitlines() == ["torchrun_jsc: stopped by SIGTERM; no worker had started"]


def test_a_second_host_on_a_taken_port_is_one_line() -> None:
    port = free_port()
    first = start(agent(f"127.0.0.1:{port}", "is_host=1"))
    try:
        time.sleep(8)  # the first host's store listens
        second = start(agent(f"127.0.0.1:{port}", "is_host=1"))
        _, err = second.communicate(timeout=60)
    finally:
        first.kill()
        first.communicate()
    assert second.returncode == 1, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("torchrun_jsc: error: the rendezvous host cannot listen"), err
    assert f"127.0.0.1:{port}" in last and "already in use" in last


def test_a_port_held_by_a_program_that_never_answers_is_named_and_the_agent_ends() -> None:
    """Issue 31, item 10: a listener that accepts and never answers holds the rendezvous port
    (torch's agent waited there silently for as long as it stayed): said after read_timeout,
    one line and exit 1 after join_timeout."""
    with socket.socket() as sink:
        sink.bind(("127.0.0.1", 0))
        sink.listen(16)
        port = sink.getsockname()[1]
        proc = start(agent(f"127.0.0.1:{port}", "join_timeout=20,read_timeout=5"))
        started = time.monotonic()
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - started
    endpoint = f"127.0.0.1:{port}"
    assert proc.returncode == 1, err
    assert (
        f"torchrun_jsc: the rendezvous host {endpoint} accepts connections but its store has"
        " not answered for 5 s"
    ) in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        f"torchrun_jsc: cannot start: the rendezvous host {endpoint} accepted connections"
    ), err
    assert took < 20 + 20, took
