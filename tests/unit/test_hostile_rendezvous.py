"""Issue 31, items 10, 12 and 13: port 0 for several nodes, a stop before torch's handlers,
and the wait for a late rendezvous host without torch's C++ retries. No network."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any, List

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import params

from .planning import plan
from .procs import stop_signals_default

SCRIPT = ["train.py"]


@pytest.mark.parametrize(
    ("argv", "verdict", "words"),
    [
        (["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0"], "refused", "port 0"),
        (["--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0"], "ok", "alone"),
        (["--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0"], "ok", None),
        (["--standalone", "--nnodes=1"], "ok", None),
        (["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29500"], "ok", None),
    ],
)
def test_port_zero_for_several_nodes_is_refused(argv: List[str], verdict: str, words: Any) -> None:
    p = plan([*argv, *SCRIPT], {})
    assert p.verdict == verdict, (p.problems, p.warnings)
    said = " ".join([*(m.message for m in p.problems), *p.warnings])
    if words is None:
        assert "port 0" not in said
    else:
        assert words in said and "no other node can know" in said


_CHILD = """
import os, signal, sys, time
from torchrun_jsc.runtime.signals.early_stop import EarlyStop
early_stop = EarlyStop()
early_stop.install({{}})
{before}
early_stop.doing("waiting for the rendezvous host h:1")
try:  # as the command's main does
    os.kill(os.getpid(), signal.{sig})
    time.sleep(5)
except KeyboardInterrupt:
    early_stop.interrupted()
print("went on")
"""


@pytest.mark.parametrize(
    ("sig", "before", "code", "line"),
    [
        ("SIGTERM", "", 1, "torchrun_jsc: stopped by SIGTERM; no worker had started (waiting"),
        ("SIGHUP", "", 1, "torchrun_jsc: stopped by SIGHUP; no worker had started (waiting"),
        ("SIGINT", "", 130, "torchrun_jsc: interrupted before the launch; nothing was started"),
        ("SIGHUP", "early_stop.keep_only(['SIGTERM'])", -signal.SIGHUP, ""),
        (
            "SIGTERM",
            "signal.signal(signal.SIGTERM, lambda s, f: print('torch', flush=True))",
            0,
            "",
        ),
    ],
)
def test_a_stop_before_torchs_handlers_is_one_line(
    sig: str, before: str, code: int, line: str
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD.format(sig=sig, before=before)],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=stop_signals_default,
    )
    assert done.returncode == code, done.stderr
    if line:
        assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(line)
        assert time.monotonic() - started < 4, "at once, not after the sleep"
    if code == 0:  # torch's handler took over: it runs, nothing of this module
        assert done.stdout.split() == ["torch", "went", "on"] and not done.stderr


def test_waiting_for_the_host_knocks_first_and_says_so_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend
    from torch.distributed.elastic.rendezvous.api import RendezvousParameters

    from torchrun_jsc.patches import wait_for_host

    clock = [0.0]
    knocks: List[Any] = []
    calls: List[Any] = []

    class Store:
        def set_timeout(self, value: Any) -> None:
            pass

        def num_keys(self) -> int:
            return 0

    def original(params: Any) -> Any:
        calls.append(clock[0])
        return Store()

    def listening(host: str, port: int, timeout: float) -> bool:
        knocks.append((host, port, timeout))
        clock[0] += 0.01
        return len(knocks) > 40

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(backend, "_create_tcp_store", original)
    monkeypatch.setattr(wait_for_host, "listening", listening)
    monkeypatch.setattr(wait_for_host.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(wait_for_host.time, "sleep", sleep)
    assert patches.install(params.WaitForHost(endpoint="node0i:29500", wait=600.0)) is None
    rdzv = RendezvousParameters("c10d", "node0i:29500", "r", 2, 2, is_host="0")
    with caplog.at_level("WARNING", logger="torchrun_jsc"):
        backend._create_tcp_store(rdzv)
    patches.restore_all()
    assert knocks[0] == ("node0i", 29500, wait_for_host.KNOCK)
    assert len(calls) == 1 and calls[0] > 40, "torch connects only once the port accepts"
    waits = [r.getMessage() for r in caplog.records if "waiting for the rendezvous" in r.message]
    assert waits[0].startswith(
        "torchrun_jsc: waiting for the rendezvous host node0i:29500 since 0 s"
    )
    assert len(waits) == 2  # at once, then after 30 s


def test_a_port_that_accepts_but_never_answers_is_named_then_ends_the_agent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's connection to another program's port hangs in C++: said after the read
    timeout, and the agent ended with one line when the wait is over."""
    import threading

    from torchrun_jsc.patches import store_answer

    exits: List[int] = []
    done = threading.Event()
    monkeypatch.setattr("os._exit", lambda code: (exits.append(code), done.set()))
    said: List[str] = []
    monkeypatch.setattr(store_answer, "_say_silent", lambda *a: said.append("silent"))

    class Store:
        def __init__(self, hang: bool) -> None:
            self.hang = hang

        def num_keys(self) -> int:
            if self.hang:  # torch 1.13: connected, and the first operation never returns
                done.wait(5.0)
            return 1

    store = Store(hang=True)
    assert store_answer.answered(lambda p: store, None, "node0i:29500", 0.05, 0.2) is store
    assert said == ["silent"] and exits == [1]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "torchrun_jsc: cannot start: the rendezvous host node0i:29500 accepted connections but"
        " its store did not answer within 0 s (another program on that port, or not torch's"
        " store); no worker was started"
    ]
    # a store that answers in time: nothing said, nothing ended
    fine = Store(hang=False)
    assert store_answer.answered(lambda p: fine, None, "node0i:29500", 0.05, 0.1) is fine
    time.sleep(0.2)
    assert said == ["silent"] and exits == [1]


def _raised_from(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except RuntimeError as exc:
            raise ValueError("The connection to the C10d store has failed.") from exc
    except ValueError as outer:
        return outer


@pytest.mark.parametrize(
    ("inner", "named"),
    [
        ("failed to listen ... code: -98, name: EADDRINUSE, message: address already in use", 1),
        ("failed to bind to 0.0.0.0:29632 (errno: 98 - Address already in use).", 1),
        ("The client socket has timed out after 60000ms", 0),
    ],
)
def test_a_taken_port_is_named_in_one_line(inner: str, named: int) -> None:
    from torchrun_jsc.cli import port_in_use

    line = port_in_use(_raised_from(RuntimeError(inner)), "127.0.0.1:29632")
    if named:
        assert line is not None and "--rdzv_endpoint=127.0.0.1:29632" in line
        assert "already in use" in line and "choose another port" in line
    else:
        assert line is None
