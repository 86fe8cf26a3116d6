"""Slurm stops the job (scancel): every node ends with one line naming the signal and Slurm's
cause, no traceback of its own, its workers stopped, exit code 1 (torch's)."""

from __future__ import annotations

import re
import time

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.scenarios import torchrun_argv
from torchrun_jsc.runtime.events import entry

pytestmark = pytest.mark.cluster


#: Where a frame of the launcher's own process lies (a worker's frames are the training
#: script's and torch.distributed's collectives).
LAUNCHER_FRAMES = ("torchrun_jsc/", "torch/distributed/run.py", "torch/distributed/elastic/")
FRAME = re.compile(r'^(?:\[rank\d+\]:)?\s+File "([^"]+)"')


def launcher_tracebacks(text: str) -> list[str]:
    """The frames of the launcher's process in any traceback of ``text``: every ``File "..."``
    line after a traceback header, up to the next line that is no frame or source line."""
    found: list[str] = []
    inside = False
    for line in text.splitlines():
        if "Traceback (most recent call last):" in line:
            inside = True
            continue
        frame = FRAME.match(line)
        if inside and frame is not None:
            if any(part in frame.group(1) for part in LAUNCHER_FRAMES):
                found.append(line)
        elif inside and not re.match(r"^(?:\[rank\d+\]:)?\s", line):
            inside = False
    return found


def test_scancel_is_one_line_per_node(main_cluster: Cluster) -> None:
    script = main_cluster.workdir / "cancel.sbatch"  # type: ignore[operator]
    command = " ".join(
        torchrun_argv(
            main_cluster.python,
            "4",
            "node0i:29500",
            "join_timeout=90,read_timeout=60",
            (),
            module="torchrun_jsc",
        )
    )
    # each task's output straight to a file of its own (slurmstepd writes it, not srun, which
    # the cancel ends too)
    task_out = main_cluster.workdir / "cancel-%t.out"  # type: ignore[operator]
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"
        "export TRJSC_TRAIN_SECONDS=300 TRJSC_PG_TIMEOUT=1800\n"
        f"srun --output={task_out} --error={task_out}"
        f" bash -c 'TORCHRUN_JSC_NODE_RANK=$SLURM_NODEID exec \"$@\"' x {command}\n"
    )
    jobid = main_cluster.sbatch(script)
    outs = [main_cluster.workdir / f"cancel-{i}.out" for i in range(4)]  # type: ignore[operator]

    def texts() -> list[str]:
        return [p.read_text() if p.exists() else "" for p in outs]

    deadline = time.monotonic() + 150
    while sum("TRJSC_TRAINING" in t for t in texts()) < 4:
        assert time.monotonic() < deadline, "\n".join(texts())[-4000:]
        time.sleep(0.5)
    cancelled = main_cluster.login(["scancel", jobid], timeout=30)
    assert cancelled.returncode == 0, cancelled.output
    state, _ = main_cluster.wait_job(jobid, timeout=150)
    assert state == "CANCELLED", "\n".join(texts())[-4000:]
    deadline = time.monotonic() + 30  # the agents end within their bounded exit
    while sum("torchrun_jsc: stopped by" in t for t in texts()) < 4:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for node, text in enumerate(texts()):
        lines = re.findall(r"^torchrun_jsc: stopped by .*$", text, re.M)
        assert len(lines) == 1, f"node{node}:\n{text[-4000:]}"
        assert lines[0].startswith(
            "torchrun_jsc: stopped by SIGTERM from Slurm (the job was cancelled (scancel) or lost"
            " a node);"
            " workers ended after "
        ), f"node{node}:\n{text[-4000:]}"
        # Slurm signals the nodes one after another: a worker whose peer ended first may fail in
        # its collective before its own signal comes; that traceback is the training's output
        # (none of its frames is the launcher's), not the launcher's
        assert launcher_tracebacks(text) == [] and "Logging error" not in text, text[-6000:]
    # the event log, in the submit directory by default: the host logged the stop and its end
    log = main_cluster.workdir / f"torchrun_jsc-{jobid}.events.jsonl"  # type: ignore[operator]
    found = entry.read(log.read_text().splitlines())
    assert found.skipped == 0, log.read_text()
    causes = [str(e.get("cause")) for e in found.entries if e.event == "stop"]
    assert any(c.startswith("stopped by SIGTERM from Slurm") for c in causes), log.read_text()
    assert [e.event for e in found.entries][:2] == ["launch", "round"], log.read_text()
    assert {e.node for e in found.entries} == {"node0"}, log.read_text()
