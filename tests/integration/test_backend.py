"""The ``jsc`` rendezvous backend on loopback, loaded by torch from its entry point: torch's own
launcher (``python -m torch.distributed.run --rdzv-backend=jsc``), ``accelerate launch`` and
``elastic_launch`` called directly (planned from the rendezvous parameters alone).
The plan's summary line (``LOGLEVEL=INFO``) shows that torchrun_jsc planned and carried out the
launch; the workers show that it trained. ``accelerate launch`` runs here when it is installed, and
on the namespace cluster (tests/cluster/test_backend.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Sequence

import pytest
import torch

from torchrun_jsc.backend.handler import PARAMS_ONLY
from torchrun_jsc.backend_name import FIRST
from torchrun_jsc.explain import EXIT
from torchrun_jsc.versions import TorchVersion

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        TorchVersion.parse(str(torch.__version__)).key < FIRST,
        reason=f"torch {torch.__version__} loads no rendezvous backends from entry points",
    ),
]

#: The cluster's Lightning Fabric workload (a DDP step, ``fabric.all_reduce``).
FABRIC_TRAIN = Path(__file__).resolve().parents[1] / "cluster" / "jobs" / "fabric_train.py"
#: Each worker's line in one write of its own: workers that share the launcher's stdout (an
#: unbuffered pipe) would otherwise interleave the pieces of a print.
WORKER = (
    "import os\n"
    "e = os.environ\n"
    "os.write(1, f\"worker {e['RANK']} {e['WORLD_SIZE']} {e['GROUP_RANK']}\\n\".encode())\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def environment() -> Dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_", "SLURM_"))
    }
    env.update(LOGLEVEL="INFO", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def agents(tmp_path: Path, commands: Sequence[List[str]]) -> List[subprocess.CompletedProcess[str]]:
    """Run the commands side by side (one agent each) and wait for all of them."""
    (tmp_path / "w.py").write_text(WORKER)
    started = [
        subprocess.Popen(
            command,
            cwd=tmp_path,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    done = []
    for proc in started:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for other in started:
                other.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def workers(runs: Sequence[subprocess.CompletedProcess[str]]) -> List[str]:
    return sorted(line for r in runs for line in r.stdout.splitlines() if line.startswith("worker"))


def planned(stderr: str) -> List[str]:
    """torchrun_jsc's plan summary lines (at ``LOGLEVEL=INFO``)."""
    return [line for line in stderr.splitlines() if line.startswith("torchrun_jsc: torch ")]


def test_torch_launcher_with_the_jsc_backend_plans_and_trains(tmp_path: Path) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=jsc",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=backend-test",
        "w.py",
    ]
    runs = agents(tmp_path, [command, command])
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
        lines = planned(r.stderr)
        assert len(lines) == 1, r.stderr[-3000:]
        assert "patched " in lines[0] and "store_answer" in lines[0], lines[0]
    assert workers(runs) == ["worker 0 2 0", "worker 1 2 1"]


def one_node(tmp_path: Path, settings: Dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m torch.distributed.run --rdzv-backend=jsc`` of one node (w.py) with
    ``settings`` added to the environment, to its end."""
    (tmp_path / "w.py").write_text(WORKER)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--rdzv-backend=jsc",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "w.py",
    ]
    env = {**environment(), **settings}
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_launch_the_plan_refuses_fails_with_its_line(tmp_path: Path) -> None:
    """A ``TORCHRUN_JSC_*`` value it does not accept: torch's launcher ends with torchrun_jsc's
    one line and exit code 2, no traceback, no worker."""
    out = one_node(tmp_path, {"TORCHRUN_JSC_REQUEUE": "sometimes"})
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("torchrun_jsc: error: ")]
    assert len(errors) == 1 and "TORCHRUN_JSC_REQUEUE='sometimes'" in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert "worker" not in out.stdout


def test_explain_through_the_backend_prints_the_plan_and_launches_nothing(tmp_path: Path) -> None:
    """``TORCHRUN_JSC_EXPLAIN`` through the backend, as through ``torchrun_jsc``: the plan (as
    c10d, with its reason) on standard output, explain's exit code, no worker; a refused setting
    is explain's error, exit code 2."""
    out = one_node(tmp_path, {"TORCHRUN_JSC_EXPLAIN": "json"})
    shown = json.loads(out.stdout)
    assert out.returncode == EXIT[shown["verdict"]], out.stderr[-3000:]
    assert shown["verdict"] == "ok", shown
    assert "--rdzv_backend=c10d" in shown["argv"], shown["argv"]
    assert any("jsc backend" in d["reason"] for d in shown["decisions"]), shown["decisions"]
    assert "Traceback" not in out.stderr
    assert "worker 0 1 0" not in out.stdout  # one node: a launch would have trained at once
    bad = one_node(tmp_path, {"TORCHRUN_JSC_EXPLAIN": "json", "TORCHRUN_JSC_REQUEUE": "sometimes"})
    assert bad.returncode == 2, bad.stderr[-3000:]
    error = json.loads(bad.stdout)
    assert error["verdict"] == "error" and "TORCHRUN_JSC_REQUEUE" in error["error"], error
    assert "Traceback" not in bad.stderr
    assert "worker 0 1 0" not in bad.stdout


def listening(port: int, within: float) -> bool:
    """Whether something accepts on 127.0.0.1:``port`` within ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(
    importlib.util.find_spec("accelerate") is None,
    reason="accelerate is not installed (the test extra has it: pip install -e '.[test]')",
)
def test_accelerate_launch_with_the_jsc_backend_plans_and_trains(tmp_path: Path) -> None:
    """Two ``accelerate launch`` agents on one machine. The second starts once the first serves
    the store: accelerate's machine rank 0 refuses a port already taken on its own machine, which
    the other agent's store would be if it started first (one machine standing for two)."""
    port = free_port()

    def command(rank: int) -> List[str]:
        return [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_machines=2",
            "--num_processes=2",
            f"--machine_rank={rank}",
            "--main_process_ip=127.0.0.1",
            f"--main_process_port={port}",
            "--rdzv_backend=jsc",
            "--mixed_precision=no",
            "--dynamo_backend=no",
            "w.py",
        ]

    (tmp_path / "w.py").write_text(WORKER)
    first = subprocess.Popen(
        command(0),
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert listening(port, 60), "machine rank 0 served no store within 60 s"
        second = agents(tmp_path, [command(1)])[0]
        out, err = first.communicate(timeout=240)
    finally:
        first.kill()
    runs = [subprocess.CompletedProcess(first.args, first.returncode, out, err), second]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
        assert len(planned(r.stderr)) == 1, r.stderr[-3000:]
    assert workers(runs) == ["worker 0 2 0", "worker 1 2 1"]


@pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None,
    reason="lightning is not installed (the test extra has it: pip install -e '.[test]')",
)
def test_fabric_run_with_the_jsc_backend_plans_and_trains(tmp_path: Path) -> None:
    """Lightning Fabric's ``fabric run`` (no rendezvous options of its own: the backend and
    endpoint reach torch's parser as ``PET_*``), two workers, a DDP step each."""
    env = environment()
    env.update(PET_RDZV_BACKEND="jsc", PET_RDZV_ENDPOINT=f"127.0.0.1:{free_port()}")
    command = [sys.executable, "-m", "lightning.fabric.cli", "--accelerator=cpu", "--devices=2"]
    out = subprocess.run(
        [*command, str(FABRIC_TRAIN)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(planned(out.stderr)) == 1, out.stderr[-3000:]
    results = sorted(line for line in out.stdout.splitlines() if line.startswith("TRJSC_RESULT"))
    assert len(results) == 2, out.stdout[-3000:]
    assert all("world=2 " in r and "allreduce=3 expect=3" in r for r in results), results


def test_elastic_launch_alone_is_planned_from_the_rendezvous_parameters(tmp_path: Path) -> None:
    """Without torch's command line the backend warns that it planned from the parameters only,
    and the launch trains."""
    (tmp_path / "w.py").write_text(WORKER)
    program = textwrap.dedent(
        f"""\
        import sys
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        if __name__ == "__main__":
            config = LaunchConfig(
                min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_backend="jsc",
                rdzv_endpoint="127.0.0.1:{free_port()}", run_id="direct", max_restarts=0,
            )
            elastic_launch(config, sys.executable)("w.py")
            print("launched", flush=True)
        """
    )
    (tmp_path / "direct.py").write_text(program)
    out = subprocess.run(
        [sys.executable, "direct.py"],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert PARAMS_ONLY in out.stderr, out.stderr[-3000:]
    assert workers([out]) == ["worker 0 2 0", "worker 1 2 0"]
    assert "launched" in out.stdout
