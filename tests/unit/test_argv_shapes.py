"""Every argument shape torchrun accepts: the options torchrun_jsc adds always reach torch, and
the worker's command line is always exactly plain torchrun's. torch's own parser is the judge."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchrun_jsc.request import read_rdzv_conf
from torchrun_jsc.torch_cli import CommandLine, Parsed

from .layouts import ib, node
from .planning import plan

torch_run = pytest.importorskip("torch.distributed.run")

ENDPOINT = ["--rdzv_backend=c10d", "--rdzv_endpoint", "node0i:29500"]
STEP = {
    "SLURM_JOB_ID": "42",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_NODELIST": "node[0-3]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
}


def worker_view(argv: List[str]) -> Tuple[Any, Any, Dict[str, Any]]:
    """What plain torchrun does with ``argv``: script, its arguments and the option values."""
    found = CommandLine({}).values(argv)
    assert isinstance(found, dict), argv
    return found["training_script"], found["training_script_args"], found


options = st.lists(
    st.sampled_from(
        [
            ["--nproc_per_node=1"],
            ["--max_restarts", "0"],
            ["--rdzv_id=7"],
            ["--rdzv-conf", "join_timeout=9"],
            ["--monitor_interval=1"],
            ["--role", "x"],
        ]
    ),
    max_size=3,
).map(lambda groups: [a for g in groups for a in g])
launch_mode = st.sampled_from([[], ["-m"], ["--no-python"], ["--run-path"]])
script_args = st.lists(
    st.sampled_from(["a", "--", "-x", "--lr=0.1", "--nnodes=9", "train.py", "--rdzv_conf=z"]),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(options, launch_mode, st.booleans(), st.booleans(), script_args, st.booleans())
def test_added_options_reach_torch_and_the_worker_sees_plain_torchruns_argv(
    opts: List[str],
    mode: List[str],
    dash_before: bool,
    dash_after: bool,
    tail: List[str],
    auto: bool,
) -> None:
    script = "pkg.train" if mode == ["-m"] else "train.py"
    head = [] if auto else ["--nnodes=4", *ENDPOINT]
    argv = [*head, *opts, *mode]
    argv += ["--"] if dash_before else []
    argv += [script] + (["--"] if dash_after else []) + tail
    env = (
        {**STEP, "TORCHRUN_JSC_SLURM_AUTO": "1", "TORCHRUN_JSC_HOST_SUFFIX": "i"} if auto else STEP
    )
    p = plan(argv, env, facts=node(1))
    before_script, before_args, _ = worker_view(argv)
    after_script, after_args, values = worker_view(list(p.argv))
    assert (after_script, after_args) == (before_script, before_args), "the worker's argv"
    assert read_rdzv_conf(values["rdzv_conf"])["is_host"] == "0"
    assert values["local_addr"] == ib(1)
    assert values["nnodes"] == "4" and values["rdzv_backend"] == "c10d"
    assert values["rdzv_endpoint"].startswith("node0i:")
    assert not p.predicted_failures and not p.warnings


@pytest.mark.parametrize(
    "argv",
    [
        ["--nnodes=4", *ENDPOINT, "--", "train.py", "a"],
        ["--nnodes=4", *ENDPOINT, "train.py", "--", "a"],
        ["--nnodes=4", *ENDPOINT, "-m", "mod", "--", "x"],
        ["--nnodes=4", *ENDPOINT, "--", "train.py", "--", "a"],
        ["--nnodes=4", *ENDPOINT, "train.py", "--nnodes=3", "--rdzv_conf=x"],
    ],
    ids=["dash-before", "dash-after", "module-dash", "dash-both", "options-after-script"],
)
def test_the_cases_that_lost_the_fix(argv: List[str]) -> None:
    p = plan(argv, {"SLURM_NODEID": "1"}, facts=node(1))
    _, _, values = worker_view(list(p.argv))
    assert values["local_addr"] == ib(1)
    assert read_rdzv_conf(values["rdzv_conf"]) == {"is_host": "0"}
    assert worker_view(list(p.argv))[:2] == worker_view(argv)[:2]


def test_version_is_the_launchers_only_before_the_script() -> None:
    mine = CommandLine({}).parse(["--nnodes=2", "--version", "train.py"])
    assert isinstance(mine, Parsed) and mine.version_requested
    alone = CommandLine({}).parse(["--version"])
    assert isinstance(alone, Parsed) and alone.version_requested
    scripts = CommandLine({}).parse(["--nnodes=2", "train.py", "--version"])
    assert isinstance(scripts, Parsed) and not scripts.version_requested
    assert scripts.values["training_script_args"] == ["--version"]


def test_help_is_torchruns_stop_with_code_0() -> None:
    found = CommandLine({}).parse(["--help"])
    assert not isinstance(found, Parsed)
    assert found.code == 0 and "--rdzv-endpoint" in found.text.replace("_", "-")
