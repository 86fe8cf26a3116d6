"""The library path for real on loopback: ``apply_fixes`` and then torch's own ``main``, the way
a program that launches (or a launcher built on torchrun) calls them, with the behaviours torch's
launcher is known for: worker counts, ``--run-path``, ``--no-python``, ``PET_*`` variables, log
files, several agents, a failing worker, two launches in one process and a forked second agent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

import pytest

pytestmark = pytest.mark.integration

# one os.write per line: workers sharing the launcher's stdout may interleave the pieces of a print
WORKER = (
    "import os\n"
    "os.write(1, f\"worker {os.environ['RANK']} {os.environ['WORLD_SIZE']}\\n\".encode())\n"
)


def driver(body: str) -> str:
    """A program that launches through the library: ``launch(argv)`` is ``apply_fixes`` then
    torch's ``main``."""
    head = textwrap.dedent(
        """\
        import os, sys, threading
        import torchrun_jsc
        from torch.distributed.run import main

        def launch(argv):
            argv = list(argv)
            torchrun_jsc.apply_fixes(argv=argv)
            main(argv)

        def watch_threads():
            return sorted(t.name for t in threading.enumerate() if t.name.startswith("trjsc-"))
        """
    )
    main = textwrap.indent(textwrap.dedent(body), "    ")
    # under a main guard, as torch asks of programs that launch: ``--run-path`` workers are
    # started by multiprocessing's spawn, which imports this file again
    return f"{head}\n\ndef _body():\n{main}\n\nif __name__ == '__main__':\n    _body()\n"


def run(
    tmp_path: Path, body: str, env: Optional[Dict[str, str]] = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "w.py").write_text(WORKER)
    (tmp_path / "driver.py").write_text(driver(body))
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_", "SLURM_"))
    }
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "driver.py"],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def workers(stdout: str) -> List[str]:
    return sorted(line for line in stdout.splitlines() if line.startswith("worker "))


def test_two_launches_in_one_process_each_with_one_job_watch(tmp_path: Path) -> None:
    out = run(
        tmp_path,
        """
        for i in range(2):
            launch(["--standalone", "--nproc-per-node=2", "w.py"])
            print("threads", i, watch_threads(), flush=True)
        """,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert workers(out.stdout) == ["worker 0 2", "worker 0 2", "worker 1 2", "worker 1 2"], (
        out.stdout + out.stderr[-3000:]
    )
    threads = [line for line in out.stdout.splitlines() if line.startswith("threads")]
    assert len(threads) == 2
    # the first launch's forwarding thread stopped when the second one was set up
    assert threads[1].count("trjsc-signals") == threads[0].count("trjsc-signals") == 1, threads


def test_a_second_agent_forked_after_a_launch_runs_and_ends(tmp_path: Path) -> None:
    out = run(
        tmp_path,
        """
        launch(["--standalone", "--nproc-per-node=2", "w.py"])
        print("first done", flush=True)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                launch(["--standalone", "--nproc-per-node=1", "w.py"])
                code = 0
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), flush=True)
        """,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "child 0" in out.stdout.splitlines(), out.stderr[-3000:]
    assert workers(out.stdout) == ["worker 0 1", "worker 0 2", "worker 1 2"]
    assert "Fatal Python error" not in out.stderr


def test_input_torch_refuses_is_a_value_error_and_nothing_is_warned(tmp_path: Path) -> None:
    out = run(
        tmp_path,
        """
        try:
            launch(["--nproc-per-node=unknown", "w.py"])
        except ValueError as error:
            print("refused", type(error).__name__, flush=True)
        """,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["refused ConfigError"]
    assert workers(out.stdout) == []
    assert "CPU" not in out.stderr, "no Slurm advice outside Slurm, none for a refused launch"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (
            ["--standalone", "--nproc-per-node=3", "w.py"],
            {},
            ["worker 0 3", "worker 1 3", "worker 2 3"],
        ),
        (["--standalone", "--nproc-per-node=cpu", "w.py"], {}, "cpu"),
        (["--standalone", "--nproc-per-node=auto", "w.py"], {}, "cpu"),
        (["--standalone", "w.py"], {"PET_NPROC_PER_NODE": "2"}, ["worker 0 2", "worker 1 2"]),
        (
            ["--standalone", "--nproc-per-node=2", "--run-path", "w.py"],
            {},
            ["worker 0 2", "worker 1 2"],
        ),
        (
            [
                "--standalone",
                "--nproc-per-node=2",
                "--no-python",
                "sh",
                "-c",
                'echo worker "$RANK" "$WORLD_SIZE"',
            ],
            {},
            ["worker 0 2", "worker 1 2"],
        ),
    ],
    ids=["int", "cpu", "auto", "PET_NPROC_PER_NODE", "run-path", "no-python"],
)
def test_worker_counts_and_commands_as_torch_starts_them(
    tmp_path: Path, argv: List[str], env: Dict[str, str], expected: object
) -> None:
    out = run(tmp_path, f"launch({argv!r})\n", env)
    assert out.returncode == 0, out.stderr[-3000:]
    if expected == "cpu":  # a CPU-only torch: one worker per CPU of the machine
        n = os.cpu_count() or 1
        expected = sorted(f"worker {r} {n}" for r in range(n))
    assert workers(out.stdout) == expected


def test_log_files_under_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    out = run(
        tmp_path,
        f"launch(['--standalone', '--nproc-per-node=2', '--log-dir', {str(logs)!r},"
        " '--redirects', '1', 'w.py'])\n",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert workers(out.stdout) == []  # redirected
    found = sorted(p.read_text().strip() for p in logs.rglob("stdout.log"))
    assert found == ["worker 0 2", "worker 1 2"]


def test_two_agents_on_loopback_form_one_job(tmp_path: Path) -> None:
    port = _free_port()
    base = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d"]
    base += [f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=lib", "w.py"]
    (tmp_path / "w.py").write_text(WORKER)
    procs = []
    for rank in range(2):
        body = f"launch({['--node-rank=' + str(rank), *base]!r})\n"
        (tmp_path / f"agent{rank}.py").write_text(driver(body))
        full = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TORCHRUN_JSC_", "PET_", "SLURM_"))
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, f"agent{rank}.py"],
                cwd=tmp_path,
                env=full,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for proc in procs:  # ends only what this test started
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_, stderr) in zip(procs, outs):
        assert proc.returncode == 0, stderr[-3000:]
    assert sorted(workers(outs[0][0]) + workers(outs[1][0])) == ["worker 0 2", "worker 1 2"]


def test_a_failing_worker_is_torchs_child_failed_error(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("raise SystemExit(3)\n")
    out = run(
        tmp_path,
        """
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        try:
            launch(["--standalone", "--nproc-per-node=2", "bad.py"])
        except ChildFailedError as error:
            print("failed", sorted(error.failures), error.get_first_failure()[1].exitcode)
        """,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "failed [0, 1] 3" in out.stdout.splitlines(), out.stdout
