"""Launches refused before they start by what this node or step cannot give them: a host node
rank no node has, a training script python cannot run here, a ``--log_dir`` torch cannot use,
``--numa-binding`` without numactl. Each is one line that names what the user set, and explain
says REFUSED with the same words."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest

from torchrun_jsc import explain, facts
from torchrun_jsc.plan import Prepared, make_plan

from .layouts import node
from .planning import plan, request
from .test_hostile_input import C10D, MULTI, ONE_NODE, SCRIPT

pytest.importorskip("torch.distributed.run")


# ---------------------------------------------------------------- a host node rank no node has


_STEP4 = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
    "SLURM_STEP_NODELIST": "node[0-3]",
}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--nnodes=4"],
            {**_STEP4, "SLURM_NODEID": "1", "TORCHRUN_JSC_HOST_NODE_RANK": "9"},
            "TORCHRUN_JSC_HOST_NODE_RANK=9 names no node of this 4-node Slurm step (node ranks"
            " 0..3): no node would host the rendezvous, so each waits until join_timeout (600 s);"
            " set it to the node rank of the node --rdzv_endpoint names, in 0..3;"
            " TORCHRUN_JSC_GUARDS=warn launches anyway",
        ),
        (
            ["--nnodes=2:4"],
            {"TORCHRUN_JSC_NODE_RANK": "1", "TORCHRUN_JSC_HOST_NODE_RANK": "4"},
            "TORCHRUN_JSC_HOST_NODE_RANK=4 names no node of --nnodes=2:4 (node ranks 0..3)",
        ),
    ],
    ids=["slurm-step", "nnodes"],
)
def test_a_host_node_rank_no_node_has_is_refused(
    argv: List[str], env: Dict[str, str], message: str
) -> None:
    req = request([*argv, *C10D, "--rdzv_endpoint=node0i:29500", *SCRIPT], env)
    p = make_plan(req, "2.13.0", node(1))
    assert p.refusal is not None and p.refusal.startswith(message), p.refusal
    assert p.verdict == "refused" and "\n" not in p.refusal
    text = explain.render(Prepared(req, node(1), p), "text")
    assert f"  REFUSED: {p.refusal}" in text.splitlines()


@pytest.mark.parametrize(
    "env",
    [
        {**_STEP4, "SLURM_NODEID": "1", "TORCHRUN_JSC_HOST_NODE_RANK": "3"},
        {"TORCHRUN_JSC_NODE_RANK": "5", "TORCHRUN_JSC_HOST_NODE_RANK": "5"},  # spares beyond 4
        {
            **_STEP4,
            "SLURM_NODEID": "1",
            "TORCHRUN_JSC_HOST_NODE_RANK": "9",
            "TORCHRUN_JSC_PREFER_ARG_PATCHING": "0",
        },
    ],
    ids=["in-range", "spare-ranks", "by-address"],
)
def test_a_host_node_rank_some_node_may_have_goes_ahead(env: Dict[str, str]) -> None:
    p = plan(["--nnodes=4", *C10D, "--rdzv_endpoint=node0i:29500", *SCRIPT], env, facts=node(1))
    assert p.refusal is None, p.refusal


# ------------------------------------------------------------ the script and the log directory


def test_what_python_and_torch_cannot_use_here_is_found(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__main__.py").write_text("pass\n")
    assert facts.script_problem(str(script)) is None
    assert facts.script_problem(str(package)) is None, "python runs a directory with __main__.py"
    assert facts.script_problem(str(tmp_path / "nope.py")) == "does not exist"
    assert facts.script_problem(str(package / "sub")) == "is a directory without __main__.py"
    assert facts.log_dir_problem(str(tmp_path)) is None
    assert facts.log_dir_problem(str(tmp_path / "new" / "logs")) is None, "torch makes it"
    assert facts.log_dir_problem("/dev/null") is None, "torch's own case"
    assert facts.log_dir_problem(str(script)) == "is not a directory"
    assert (
        facts.log_dir_problem(str(script / "logs"))
        == f"cannot be made: {script} is not a directory"
    )


@pytest.mark.parametrize(
    ("argv", "env", "found", "message"),
    [
        (
            ["train.py"],
            {},
            {"script_problem": "does not exist"},
            "the training script 'train.py' does not exist on node1, so every worker would stop"
            " at once; give its path (relative to the directory torchrun_jsc starts in), or -m"
            " for a module, --no-python for a program; TORCHRUN_JSC_GUARDS=warn launches anyway",
        ),
        (
            ["data/"],
            {},
            {"script_problem": "is a directory without __main__.py"},
            "the training script 'data/' is a directory without __main__.py on node1",
        ),
        (
            ["--log-dir=out.txt", "train.py"],
            {},
            {"log_dir_problem": "is not a directory"},
            "--log_dir 'out.txt' is not a directory, so torch's agent would stop as it starts;"
            " give a directory, or a path that does not exist yet (torch makes it);"
            " TORCHRUN_JSC_GUARDS=warn launches anyway",
        ),
        (
            ["train.py"],
            {"PET_LOG_DIR": "out.txt/logs"},
            {"log_dir_problem": "cannot be made: /w/out.txt is not a directory"},
            "PET_LOG_DIR 'out.txt/logs' cannot be made: /w/out.txt is not a directory, so",
        ),
        (
            ["--numa-binding=node", "train.py"],
            {},
            {"numactl": False},
            "--numa_binding=node: torch starts every worker under numactl, which is not on the"
            " PATH of node1, so every worker would stop at once; install numactl there, or leave"
            " out --numa-binding; TORCHRUN_JSC_GUARDS=warn launches anyway",
        ),
    ],
    ids=["missing-script", "directory", "log-dir-file", "pet-log-dir-under-a-file", "numactl"],
)
def test_a_script_or_log_dir_this_node_cannot_use_is_refused(
    argv: List[str], env: Dict[str, str], found: Dict[str, str], message: str
) -> None:
    req = request([*MULTI, *argv], {"SLURM_NODEID": "1", **env})
    here = node(1)._replace(**found)
    p = make_plan(req, "2.13.0", here)
    assert p.refusal is not None and p.refusal.startswith(message), p.refusal
    text = explain.render(Prepared(req, here, p), "text")
    assert f"  REFUSED: {p.refusal}" in text.splitlines() and text.endswith("verdict: refused")


def test_numa_binding_with_numactl_on_the_path_is_launched() -> None:
    req = request([*MULTI, "--numa-binding=socket", "train.py"], {"SLURM_NODEID": "1"})
    assert req.options is not None and req.options.numa_binding == "socket"
    assert make_plan(req, "2.13.0", node(1)._replace(numactl=True)).refusal is None


def test_numactl_is_looked_for_only_with_numa_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert facts.gather(None, 0.0).numactl is None
    assert facts.gather(None, 0.0, numa=True).numactl is False
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert facts.gather(None, 0.0, numa=True).numactl is True


@pytest.mark.parametrize(
    "argv", [["-m", "pkg.train"], ["--no-python", "hostname"], ["--run-path", "x.py"], ["-"]]
)
def test_a_script_that_is_no_path_python_opens_is_not_looked_at(argv: List[str]) -> None:
    req = request([*ONE_NODE, *argv])
    assert req.script_path is None
    p = make_plan(req, "2.13.0", node(0)._replace(script_problem="does not exist"))
    assert p.refusal is None
