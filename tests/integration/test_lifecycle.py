"""After the start, on this machine with real torch and real processes (--standalone): the
first-failure line, signals passed on, grace before SIGKILL, no orphans, the out-of-memory
killer named. The multi-node parts run on the namespace cluster (tests/cluster/test_lifecycle.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from torchrun_jsc.runtime.signals import probe as signal_probe

pytestmark = pytest.mark.integration

TRAIN = Path(__file__).resolve().parents[1] / "cluster" / "jobs" / "train.py"


def environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCHRUN_JSC_", "PET_", "SLURM_", "TRJSC_"))
    }
    env.update(extra or {})
    return env


def launch(args: List[str], extra: Optional[Dict[str, str]] = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "torchrun_jsc", "--standalone", *args],
        env=environment(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(proc: subprocess.Popen[str], word: str, count: int, limit: float = 90) -> List[str]:
    """Read the agent's stdout until ``word`` was seen ``count`` times."""
    seen: List[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + limit
    for line in proc.stdout:
        seen.append(line)
        if sum(s.count(word) for s in seen) >= count:  # two workers may share a line
            return seen
        assert time.monotonic() < deadline, f"{word} not seen {count} times: {seen}"
    raise AssertionError(f"output ended before {count}x {word}: {seen}")


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


#: What the signal probe's command line has and a worker's has not.
PROBE = signal_probe.CODE.encode()


def children(pid: int, watcher: bool = False) -> List[int]:
    """The agent's workers (its children but the orphan watcher and the signal probe), or with
    ``watcher`` only the watcher."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent != pid or PROBE in cmdline:  # no worker, no watcher
                continue
            if (b"runtime/processes/orphans.py" in cmdline) == watcher:
                found.append(int(entry.name))
    return found


def last_line(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


def test_first_failure_is_the_last_line() -> None:
    proc = launch(
        ["--nproc_per_node=2", str(TRAIN)],
        {"TRJSC_TRAIN_SECONDS": "30", "TRJSC_FAIL_RANK": "1", "TRJSC_FAIL_CODE": "3"},
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    line = last_line(err)
    assert line.startswith("torchrun_jsc: first failure: "), err[-3000:]
    assert "rank 1 (local rank 1) exited with code 3 at " in line
    assert line.endswith("; 1 rank stopped after it"), line


def test_first_failure_quotes_the_error_file(tmp_path: Path) -> None:
    script = tmp_path / "recorded.py"
    script.write_text(
        "import os, time\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "@record\n"
        "def main():\n"
        "    time.sleep(1)\n"
        "    if os.environ['LOCAL_RANK'] == '0':\n"
        "        raise ValueError('bad batch 17')\n"
        "    time.sleep(30)\n"
        "main()\n"
    )
    proc = launch(["--nproc_per_node=2", str(script)])
    _, err = proc.communicate(timeout=120)
    assert last_line(err).endswith(
        "rank 0 (local rank 0) exited with code 1 at "
        + last_line(err).split(" exited with code 1 at ")[1].split(": ")[0]
        + ": ValueError: bad batch 17; 1 rank stopped after it"
    ), err[-2000:]


def test_no_report_when_switched_off() -> None:
    proc = launch(
        ["--nproc_per_node=1", str(TRAIN)],
        {"TRJSC_TRAIN_SECONDS": "30", "TRJSC_FAIL_RANK": "0", "TORCHRUN_JSC_FAILURE_REPORT": "0"},
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "torchrun_jsc: first failure" not in err


def test_sigusr1_reaches_every_worker_once_and_training_goes_on() -> None:
    proc = launch(
        ["--nproc_per_node=2", str(TRAIN)], {"TRJSC_TRAIN_SECONDS": "10", "TRJSC_SIGNALS": "1"}
    )
    seen = wait_for(proc, "TRJSC_TRAINING", 2)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    text = "".join(seen) + out
    assert proc.returncode == 0, err[-3000:]
    signals = [ln for ln in text.splitlines() if ln.startswith("TRJSC_SIGNAL")]
    assert sorted(ln.split()[2] for ln in signals) == ["rank=0", "rank=1"], text
    assert all("signal=SIGUSR1" in ln for ln in signals)
    assert "torchrun_jsc: passed SIGUSR1 on to 2 worker(s)" in err


def test_sigusr1_without_a_handler_kills_both_ranks_and_the_line_says_so() -> None:
    """The script has no handler: both workers die of the one signal; neither was 'stopped
    after' the other (before: '1 rank stopped after it')."""
    proc = launch(["--nproc_per_node=2", str(TRAIN)], {"TRJSC_TRAIN_SECONDS": "60"})
    wait_for(proc, "TRJSC_TRAINING", 2)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    line = last_line(err)
    assert line.startswith("torchrun_jsc: first failure: "), err[-3000:]
    assert "was killed by SIGUSR1 at " in line, line
    assert line.endswith(", 1 more rank the same way"), line


def test_sigterm_twice_is_one_line_and_exit_1() -> None:
    """scancel sends SIGTERM to the agent (and Slurm more than once): one line, no traceback,
    no second one from the signal that came during torch's shutdown, torch's exit code."""
    proc = launch(["--nproc_per_node=2", str(TRAIN)], {"TRJSC_TRAIN_SECONDS": "60"})
    wait_for(proc, "TRJSC_TRAINING", 2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("torchrun_jsc: ")]
    assert len(lines) == 1 and lines[0].startswith("torchrun_jsc: stopped by SIGTERM; workers"), err
    assert "Traceback" not in err and "Logging error" not in err, err[-3000:]


def test_sigusr1_is_left_to_torch_when_switched_off() -> None:
    proc = launch(
        ["--nproc_per_node=1", str(TRAIN)],
        {
            "TRJSC_TRAIN_SECONDS": "30",
            "TRJSC_SIGNALS": "1",
            "TORCHRUN_JSC_FORWARD_SIGNALS": "none",
            "TORCHRUN_JSC_KILL_ORPHANS": "0",
        },
    )
    wait_for(proc, "TRJSC_TRAINING", 1)
    workers = children(proc.pid)
    proc.send_signal(signal.SIGUSR1)
    proc.wait(timeout=60)  # not communicate(): the orphan keeps the output pipe open
    assert proc.returncode == -signal.SIGUSR1, "plain torchrun: the agent dies"
    time.sleep(1)
    assert workers and all(alive(w) for w in workers), "and its worker runs on as an orphan"
    for w in workers:
        os.kill(w, signal.SIGKILL)


def test_workers_die_with_a_killed_agent() -> None:
    proc = launch(["--nproc_per_node=2", str(TRAIN)], {"TRJSC_TRAIN_SECONDS": "120"})
    wait_for(proc, "TRJSC_TRAINING", 2)
    workers = children(proc.pid)
    watcher = children(proc.pid, watcher=True)
    assert len(workers) == 2 and len(watcher) == 1, (workers, watcher)
    proc.kill()
    _, err = proc.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while any(alive(w) for w in workers + watcher) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "a worker outlived its agent by 5 s"
    assert not alive(watcher[0]), "the watcher ends with its work"
    assert "ended and left 2 worker(s) running; killed them" in err, err[-2000:]


IGNORES_TERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + (
    "print('TRJSC_TRAINING', flush=True)\ntime.sleep(120)\n"
)


@pytest.mark.parametrize("grace", ["2"])
def test_term_grace_bounds_a_worker_that_ignores_sigterm(tmp_path: Path, grace: str) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(IGNORES_TERM)
    proc = launch(["--nproc_per_node=1", str(script)], {"TORCHRUN_JSC_TERM_GRACE": grace})
    wait_for(proc, "TRJSC_TRAINING", 1)
    workers = children(proc.pid)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    took = time.monotonic() - started
    assert proc.returncode != 0
    assert not any(alive(w) for w in workers)
    assert took < 20, f"SIGKILL came after {took:.1f} s, not after the {grace} s grace (torch: 30)"


def _memory_cgroup() -> Optional[Path]:
    root = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        return None
    return root


def test_the_out_of_memory_killer_is_named(tmp_path: Path) -> None:
    root = _memory_cgroup()
    if root is None:
        pytest.skip("needs root and a cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
    group = root / f"trjsc-oom-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(900 * 2**20))
        script = tmp_path / "hog.py"
        script.write_text(
            "import os, time\n"
            "time.sleep(1)\n"
            "if os.environ['LOCAL_RANK'] == '1':\n"
            "    blocks = [bytearray(64 * 2**20) for _ in range(64)]\n"
            "time.sleep(60)\n"
        )
        wrapper = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"]
        proc = subprocess.Popen(
            [
                *wrapper,
                sys.executable,
                "-m",
                "torchrun_jsc",
                "--standalone",
                "--nproc_per_node=2",
                str(script),
            ],
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate(timeout=180)
        line = last_line(err)
        assert "rank 1 (local rank 1) was killed by the out-of-memory killer (SIGKILL)" in line, (
            err[-3000:]
        )
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.5)
        group.rmdir()
