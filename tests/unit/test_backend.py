"""The ``jsc`` rendezvous backend's pure parts: the command line read back from torch's parsed
arguments, the rendezvous parameters of the planned one, the refusal on an old torch."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional

import pytest

from torchrun_jsc import backend as entry
from torchrun_jsc.backend import handler as backend
from torchrun_jsc.torch_cli import TorchCli

from .layouts import node
from .planning import JSC, plan

pytest.importorskip("torch.distributed.run")

SCRIPT = ["train.py", "--lr", "0.1", "--flag"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--nnodes=4", "--rdzv-backend=jsc", "--rdzv-endpoint=node0i:29500", *SCRIPT],
        ["--nnodes", "2:4", "--rdzv_backend", "jsc", "--rdzv_endpoint", "node0i", *SCRIPT],
        [
            "--nnodes=4",
            "--nproc-per-node=2",
            "--max-restarts=3",
            "--node-rank=2",
            "--rdzv-backend=jsc",
            "--rdzv-id=77",
            "--rdzv-endpoint=node0i:29500",
            "--rdzv-conf=join_timeout=60,is_host=0",
            "--monitor-interval=0.5",
            "--local-addr=node2i",
            *SCRIPT,
        ],
        ["--nnodes=4", "--rdzv-backend=jsc", "--rdzv-endpoint=n:1", "--no-python", "sh", "-c", "x"],
        ["--nnodes=4", "--rdzv-backend=jsc", "--rdzv-endpoint=n:1", "-m", "pkg.mod", "--a"],
        ["--nnodes=4", "--rdzv-backend=jsc", "--rdzv-endpoint=n:1", "--run-path", *SCRIPT],
    ],
    ids=["equals", "spaces", "many", "no-python", "module", "run-path"],
)
def test_the_command_line_read_back_parses_as_torchs_and_is_planned_with_c10d(
    argv: List[str],
) -> None:
    parser = TorchCli().parser()
    given = parser.parse_args(argv)
    read_back = backend.argv_of(parser, given)
    assert vars(parser.parse_args(read_back)) == vars(given)
    planned = plan(read_back, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert planned.error is None and planned.refusal is None, planned.error
    again = parser.parse_args(list(planned.argv))
    assert again.rdzv_backend == "c10d"
    assert again.training_script == given.training_script
    assert again.training_script_args == given.training_script_args


def test_a_launch_without_a_script_is_a_one_line_error() -> None:
    parser = TorchCli().parser()
    given = parser.parse_args(["--rdzv-backend=jsc", "t.py"])
    given.training_script = None
    with pytest.raises(ValueError, match="names no training script"):
        backend.argv_of(parser, given)


def test_the_planned_command_line_becomes_torchs_rendezvous_parameters() -> None:
    parser = TorchCli().parser()
    planned = parser.parse_args(
        [
            "--nnodes=2:4",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=node0i:29500",
            "--rdzv-conf=join_timeout=60,is_host=1",
            "--local_addr=10.0.0.1",
            *SCRIPT,
        ]
    )
    found = backend.parameters(planned, "77", {"read_timeout": "30", "is_host": "0"}, TorchCli())
    assert found == {
        "backend": "c10d",
        "endpoint": "node0i:29500",
        "run_id": "77",
        "min_nodes": 2,
        "max_nodes": 4,
        "local_addr": "10.0.0.1",
        "read_timeout": "30",
        "join_timeout": "60",
        "is_host": "1",  # the plan's word wins over what torch was given
    }


class _Params(NamedTuple):
    """The fields of torch's ``RendezvousParameters`` the backend reads."""

    min_nodes: int = 2
    max_nodes: int = 4
    endpoint: str = "node0i:29500"
    run_id: str = "9"
    local_addr: Optional[str] = None
    config: Dict[str, object] = {"rank": 1, "join_timeout": "60", "timeout": 900}  # noqa: RUF012 - read only


def test_from_the_rendezvous_parameters_alone() -> None:
    argv = backend.argv_of_params(_Params())
    parsed = TorchCli().parser().parse_args(argv)
    assert (parsed.nnodes, parsed.rdzv_backend, parsed.rdzv_endpoint) == (
        "2:4",
        "jsc",
        "node0i:29500",
    )
    planned = plan(argv, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert planned.error is None and planned.refusal is None, planned.error
    assert TorchCli().parser().parse_args(list(planned.argv)).rdzv_backend == "c10d"
    assert (parsed.rdzv_id, parsed.rdzv_conf) == ("9", "join_timeout=60")
    assert parsed.no_python and parsed.training_script == "true"


def test_the_entry_point_gives_torch_the_creator_and_an_old_torch_is_refused() -> None:
    assert callable(entry.creator())
    line = backend.refusal("2.5.1")
    assert "\n" not in line and "torch >= 2.6" in line and "torchrun_jsc" in line


@pytest.mark.parametrize("version", ["1.13.1", "2.5.1", "2.13.0"])
def test_the_command_plans_the_jsc_backend_as_c10d_on_every_release(version: str) -> None:
    """``torchrun_jsc --rdzv_backend=jsc`` (a job script written for torchrun with the backend)
    is torchrun_jsc's own c10d launch: the same fixes, torch never asked for the backend."""
    named = [a.replace("--rdzv_backend=c10d", "--rdzv_backend=jsc") for a in JSC]
    env = {"SLURM_NODEID": "1"}
    with_jsc = plan(named, env, version, node(1))
    with_c10d = plan(JSC, env, version, node(1))
    assert with_jsc.error is None and with_jsc.refusal is None
    parsed = TorchCli().parser().parse_args(list(with_jsc.argv))
    assert parsed.rdzv_backend == "c10d"
    assert with_jsc.added_args == ("--rdzv_backend=c10d", *with_c10d.added_args)
    assert with_jsc.env == with_c10d.env and with_jsc.patches == with_c10d.patches
