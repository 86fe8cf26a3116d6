"""The orphan watcher (workers die with their agent) and the memory cgroup's out-of-memory
count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from tests.unit.procs import children
from torchrun_jsc.runtime.processes import orphans, workers


def test_watcher_reads_what_the_agent_wrote() -> None:
    lines = ["123 4567\n", "garbage\n", "\n", "x 1\n", "99 1 2\n", "7 88"]
    assert orphans.parse(lines) == [(123, "4567"), (7, "88")]


def test_start_time_is_that_of_the_process() -> None:
    mine = orphans.start_time(os.getpid())
    assert mine is not None and mine.isdigit()
    assert orphans.start_time(os.getpid()) == mine
    assert orphans.start_time(2**22 + 1) is None  # above Linux's largest pid


def test_watcher_kills_a_left_worker_and_its_group_but_not_a_reused_number() -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], start_new_session=True, stdout=subprocess.PIPE
    )
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert leader.stdout is not None
        in_group = int(leader.stdout.readline())
        started = orphans.start_time(leader.pid)
        assert started is not None
        wrong = str(int(orphans.start_time(other.pid) or 0) + 1)  # as if the number was reused
        killed = orphans.kill_left([(leader.pid, started), (other.pid, wrong), (2**22 + 1, "1")])
        assert killed == [leader.pid]
        assert leader.wait(timeout=5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while _alive(in_group) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(in_group), "the worker's process group is killed with it"
        assert other.poll() is None, "a process that is not the worker it was told about lives"
    finally:
        other.kill()
        other.wait()
        leader.kill()
        leader.wait()


def test_watcher_leaves_a_worker_that_has_ended_but_is_not_reaped() -> None:
    done = subprocess.Popen(["true"])
    started = orphans.start_time(done.pid)
    assert started is not None
    deadline = time.monotonic() + 5
    while _alive(done.pid) and time.monotonic() < deadline:  # a zombie now: nobody waited
        time.sleep(0.02)
    try:
        assert orphans.kill_left([(done.pid, started)]) == [], "a zombie is not reported killed"
    finally:
        done.wait()


AGENT = """
import subprocess, sys
from torchrun_jsc.runtime.processes.orphans import Watcher
watcher = Watcher()
assert watcher.start() is None
worker = subprocess.Popen(["sleep", "60"])
watcher.tell(worker.pid)
print(worker.pid, flush=True)
sys.stdin.read()
"""


def test_workers_die_with_an_agent_killed_by_sigkill() -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None and agent.stderr is not None
    worker = int(agent.stdout.readline())
    watcher = [p for p in children(agent.pid) if p != worker]
    assert len(watcher) == 1, "one watcher beside the worker"
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    deadline = time.monotonic() + 5
    while (_alive(worker) or _alive(watcher[0])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker), "the worker outlived its agent by 5 s"
    assert not _alive(watcher[0]), "the watcher ends once it has done its work"
    err = agent.stderr.read()
    assert f"the agent (pid {agent.pid}) ended and left 1 worker(s) running" in err, err


def test_watcher_ends_quietly_with_an_agent_whose_workers_are_done() -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT.replace('"sleep", "60"', '"true"')],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = agent.communicate("", timeout=30)  # the agent ends normally; so does the watcher
    assert agent.returncode == 0 and out.strip().isdigit()
    assert "torchrun_jsc" not in err, err


def _alive(pid: int) -> bool:
    """Running (not a zombie, not gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize(
    ("cgroup", "files", "count"),
    [
        ("0::/slurm/job1\n", {"slurm/job1/memory.events": "low 0\noom 2\noom_kill 3\n"}, 3),
        (
            "5:memory:/slurm/job1\n4:cpu:/x\n",
            {"memory/slurm/job1/memory.oom_control": "oom_kill_disable 0\noom_kill 7\n"},
            7,
        ),
        ("0::/x\n", {}, None),
    ],
    ids=["v2", "v1", "unreadable"],
)
def test_oom_count_from_the_memory_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cgroup: str, files: dict, count: Optional[int]
) -> None:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(cgroup)
    for name, text in files.items():
        path = tmp_path / "sys" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    real = Path

    def fake(*parts: str) -> Path:
        joined = "/".join(parts)
        if joined == "/proc/self/cgroup":
            return proc
        if joined.startswith("/sys/fs/cgroup"):
            return real(str(tmp_path / "sys") + joined[len("/sys/fs/cgroup") :])
        return real(*parts)

    monkeypatch.setattr(workers, "Path", fake)
    assert workers.oom_kills() == count
