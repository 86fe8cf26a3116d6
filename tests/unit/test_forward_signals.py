"""SIGUSR1/SIGUSR2 reach every worker once: the decision (pure), the signal probe, and an agent
with a worker signalled the ways a Slurm step or a user does (local processes, no network)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import params
from torchrun_jsc.runtime.signals import probe as signal_probe
from torchrun_jsc.runtime.signals.direct import EARLIER, LATER, Receipt, decide, unpaired

from .planning import plan
from .procs import children

USR1, USR2 = int(signal.SIGUSR1), int(signal.SIGUSR2)
STEPD = Receipt(USR1, 100.0, 4242, "slurmstepd")
#: A worker's command line as torch starts it.
TRAIN = (sys.executable, "-u", "/home/user/train.py", "--epochs", "3", "--local-rank=0")


# --------------------------------------------------------------------------- the decision


def test_a_probe_receipt_of_the_same_signal_means_the_sender_reached_the_workers() -> None:
    # the probe's report came before the agent's handler ran (even much later), or after it
    for handler_at in (100.0003, 100.0 + EARLIER, 100.0 - LATER):
        d = decide(USR1, handler_at, [STEPD], 100.0 + LATER + 1, True)
        assert d.action == "direct" and d.paired == (STEPD,), handler_at
        assert d.reason == "from pid 4242 (slurmstepd), which signalled the workers too"


def test_the_agent_waits_for_the_probe_then_passes_the_signal_on() -> None:
    assert decide(USR1, 100.0, [], 100.0 + LATER / 2, True).action == "wait"
    d = decide(USR1, 100.0, [], 100.0 + LATER, True)
    assert d.action == "forward" and d.paired == ()
    assert d.reason == "its sender did not signal the workers (the probe got none in 2 s)"


def test_a_receipt_of_another_signal_or_time_does_not_pair() -> None:
    other = STEPD._replace(signum=USR2)
    old = STEPD._replace(at=100.0 - EARLIER - 0.1)
    late = STEPD._replace(at=100.0 + LATER + 0.1)
    assert decide(USR1, 100.0, [other, old, late], 100.0 + LATER, True).action == "forward"
    assert decide(USR1, 100.0, [other, old, late], 100.0 + 0.1, True).action == "wait"


def test_one_handler_run_for_several_signals_pairs_with_all_of_them() -> None:
    """Python runs a handler once for signals that came while the main thread was away."""
    second = STEPD._replace(at=100.5)
    d = decide(USR1, 101.0, [STEPD, second], 101.0, True)
    assert d.action == "direct" and d.paired == (STEPD, second)
    assert unpaired([STEPD, second], d.paired, 101.0) == []
    # a report that comes after the handler pairs alone: the next signal may be its own
    after = decide(USR1, 99.0, [STEPD, second], 99.0, True)
    assert after.paired == (STEPD,)


def test_without_a_probe_every_signal_is_passed_on_at_once() -> None:
    d = decide(USR1, 100.0, [], 100.0, False)
    assert d.action == "forward"
    assert "no signal probe" in d.reason
    # what the probe got before it ended still counts
    assert decide(USR1, 100.0, [STEPD], 100.0, False).action == "direct"


def test_a_paired_receipt_is_used_once_and_old_ones_are_dropped() -> None:
    old = STEPD._replace(at=100.0 - EARLIER - 1)
    later = STEPD._replace(at=100.5, sender=7)
    assert unpaired([old, STEPD, later], (STEPD,), 100.2) == [later]
    assert unpaired([old, later], (), 100.2) == [later]


def test_probe_lines_parse_back() -> None:
    line = signal_probe.report_line(USR1, 12.5, os.getpid())
    found = signal_probe.parse_line(line)
    assert found is not None
    assert found[:3] == (USR1, 12.5, os.getpid()) and found.sender_name not in ("", "?")
    assert signal_probe.parse_line("10 x 5 bash\n") is None
    assert signal_probe.parse_line("garbage\n") is None


def test_explain_states_the_rule() -> None:
    p = plan(["--standalone", "--nproc_per_node=2", "train.py"])
    [d] = [d for d in p.decisions if d.topic == "SIGUSR1, SIGUSR2"]
    assert d.value == "passed on unless the workers got them"
    assert "probe process started like the workers" in d.reason and "not passed on" in d.reason


# --------------------------------------------------------------------------- the probe


def _blocked(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigBlk for {pid}")


def _until(what: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_probe_reports_the_sender_and_ends_with_its_pipe() -> None:
    ended: List[str] = []
    probe = signal_probe.Probe([USR1, USR2])
    assert probe.start(on_end=ended.append, worker=TRAIN) is None
    pid = probe.pid
    assert pid is not None
    try:
        mask = _blocked(pid)
        assert mask & (1 << (USR1 - 1)) and mask & (1 << (USR2 - 1)), hex(mask)
        assert os.getsid(pid) == pid, "a session of its own, as the workers"
        before = _blocked(os.getpid())
        assert not before & (1 << (USR1 - 1)), "the agent's own mask is left as it was"
        time.sleep(0.3)  # past its start: SIGTERM is ignored, USR1 reported
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGUSR2)
        _until(lambda: bool(probe.receipts))
        [got] = probe.receipts
        assert (got.signum, got.sender) == (USR2, os.getpid())
        assert abs(got.at - time.monotonic()) < 5
        assert probe.running
    finally:
        probe.stop()
    assert not probe.running and ended == [], "a stop is no surprise"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_probe_has_the_workers_command_line_and_no_path_of_the_project() -> None:
    """A sender that picks processes by command line (``pkill -f``) reaches the probe exactly
    when it reaches the workers: ``torchrun_jsc`` only where the worker's command has it."""
    probe = signal_probe.Probe([USR1])
    assert probe.start(on_end=lambda why: None, worker=TRAIN) is None
    pid = probe.pid
    assert pid is not None
    expected = [sys.executable, "-I", "-S", "-c", signal_probe.CODE, *TRAIN]

    def words() -> List[str]:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]

    try:
        # until its exec: before it, the child's command line is still this process's
        _until(lambda: words() == expected)
        assert "torchrun_jsc" not in signal_probe.CODE.lower()
        time.sleep(0.3)
        os.kill(pid, signal.SIGUSR1)
        _until(lambda: bool(probe.receipts))
        assert [r.signum for r in probe.receipts] == [USR1]
    finally:
        probe.stop()


def test_a_probe_that_dies_is_reported() -> None:
    ended: List[str] = []
    probe = signal_probe.Probe([USR1])
    assert probe.start(on_end=ended.append, worker=TRAIN) is None
    assert probe.pid is not None
    os.kill(probe.pid, signal.SIGKILL)
    _until(lambda: bool(ended))
    assert ended == ["the signal probe ended (exit code -9)"]
    assert not probe.running
    probe.stop()


def test_a_probe_that_cannot_start_says_why_and_leaves_the_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    probe = signal_probe.Probe([USR1])
    problem = probe.start(on_end=lambda why: None, worker=TRAIN)
    assert problem is not None and problem.startswith("the signal probe did not start (")
    assert not probe.running and probe.pid is None
    assert not _blocked(os.getpid()) & (1 << (USR1 - 1))
    assert decide(USR1, 1.0, [], 1.0, probe.running).action == "forward"
    probe.stop()


def test_forward_signals_passes_the_signal_on_and_is_undone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchrun_jsc.runtime import agent

    workers = agent.runtime().workers
    sent: List[int] = []
    monkeypatch.setattr(workers, "signal_all", lambda signum: sent.append(signum) or 3)
    before = signal.getsignal(signal.SIGUSR2)
    assert patches.install(params.ForwardSignals(signals=("SIGUSR2",))) is None
    handler = signal.getsignal(signal.SIGUSR2)
    assert callable(handler)
    handler(signal.SIGUSR2, None)  # type: ignore[operator]
    _until(lambda: sent == [USR2], 5)  # no worker yet, no probe: at once
    workers.starting(TRAIN)  # worker_start, before torch's first worker
    handler(signal.SIGUSR2, None)  # type: ignore[operator]
    time.sleep(0.2)
    assert sent == [USR2], "not before the probe had its time"
    _until(lambda: sent == [USR2, USR2], LATER + 5)
    patches.restore_all()
    assert signal.getsignal(signal.SIGUSR2) == before
    workers.starting(TRAIN)  # no longer heard


# --------------------------------------------------------------------------- an agent

WORKER = """
import os, signal, sys, time
def got(signum, frame):
    os.write(1, f"GOT {signal.Signals(signum).name}\\n".encode())
signal.signal(signal.SIGUSR1, got)
print("UP", flush=True)
while True:
    time.sleep(1)
"""

AGENT = """
import signal, subprocess, sys
from torchrun_jsc.log import setup
from torchrun_jsc.patches.forward_signals import Forwarder
from torchrun_jsc.runtime.processes.workers import Workers
setup({})
workers = Workers()
forwarder = Forwarder([signal.SIGUSR1, signal.SIGUSR2], workers)  # install's, without torch
forwarder.start()
workers.before_start(forwarder.starting)
for number in forwarder.signals:
    signal.signal(number, forwarder.noted)
assert "torch" not in sys.modules
command = [sys.executable, "-c", sys.argv[1]]
workers.starting(command)  # what worker_start does
worker = subprocess.Popen(command, start_new_session=True)
workers.register(worker)
print("READY", worker.pid, flush=True)
sys.stdin.read()
worker.kill()
worker.wait()
"""


def _descendants(pid: int) -> List[int]:
    found = []
    for child in children(pid):
        found += [child, *_descendants(child)]
    return found


def _step(agent: int) -> None:  # slurmstepd with proctrack/linuxproc: the task's whole tree
    for pid in _descendants(agent):
        os.kill(pid, signal.SIGUSR1)
    os.kill(agent, signal.SIGUSR1)


def _agent_only(agent: int) -> None:  # kill -USR1 <agent>, or srun passing on a trapped signal
    os.kill(agent, signal.SIGUSR1)


def _group(agent: int) -> None:  # the task's process group: proctrack/pgid
    os.killpg(os.getpgid(agent), signal.SIGUSR1)


def _by_command(agent: int, word: bytes) -> None:  # pkill -f <word>, in the agent's tree only
    for pid in [agent, *_descendants(agent)]:
        if word in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGUSR1)


SENDERS: Dict[str, Callable[[int], None]] = {
    "step": _step,
    "agent-only": _agent_only,
    "process-group": _group,
    # a word of the launcher's command line only (as `pkill -f torchrun_jsc`)
    "launcher-name": lambda agent: _by_command(agent, b"import Forwarder"),
    # a word of the worker's command line, which the launcher's has too (`pkill -f train.py`)
    "worker-name": lambda agent: _by_command(agent, b"GOT {signal"),
}


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("step", "signalled the workers too; not passed on"),
        ("agent-only", "passed SIGUSR1 on to 1 worker(s)"),
        ("process-group", "passed SIGUSR1 on to 1 worker(s)"),
        ("launcher-name", "passed SIGUSR1 on to 1 worker(s)"),
        ("worker-name", "signalled the workers too; not passed on"),
    ],
)
def test_an_agents_worker_gets_a_signal_once_whoever_sent_it(how: str, says: str) -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    out: Any = agent.stdout
    try:
        seen = [out.readline(), out.readline()]
        words = sorted((line.split() or [repr(line)])[0] for line in seen if line)
        assert words == ["READY", "UP"], seen  # a line without a word shows as itself
        SENDERS[how](agent.pid)
        time.sleep(LATER + 1.5)
        assert agent.poll() is None, "the agent goes on"
        rest, err = agent.communicate("", timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    got = [line for line in rest.splitlines() if line.startswith("GOT")]
    assert got == ["GOT SIGUSR1"], f"{got}\n{err}"
    assert says in err, err


def test_the_host_logs_each_signal_passed_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where this node writes the event log, each SIGUSR1/SIGUSR2 is a ``signal`` event."""
    from torchrun_jsc.runtime import agent
    from torchrun_jsc.runtime.events import entry
    from torchrun_jsc.runtime.events.entry import LogTarget

    from .sessions import new_session

    path = tmp_path / "ev.jsonl"
    session = new_session(0, is_host=True, events=LogTarget(str(path), "7"))
    runtime = agent.runtime()
    monkeypatch.setattr(runtime, "session", session)
    monkeypatch.setattr(runtime.workers, "signal_all", lambda signum: 2)
    assert patches.install(params.ForwardSignals(signals=("SIGUSR2",))) is None
    try:
        handler = signal.getsignal(signal.SIGUSR2)
        handler(signal.SIGUSR2, None)  # type: ignore[operator]
        _until(lambda: session.chronicle.log is not None, 5)
        assert session.chronicle.log is not None and session.chronicle.log.close(5)
        events = entry.read(path.read_text().splitlines()).entries
        assert [(e.event, dict(e.fields)) for e in events][1:] == [
            ("signal", {"signal": "SIGUSR2", "passed_on": True, "workers": 2})
        ]
    finally:
        patches.restore_all()
        session.close()
