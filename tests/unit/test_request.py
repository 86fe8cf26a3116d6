"""The request is read once: torch's parser runs as often with Slurm auto-configuration as
without it, and the auto-configured options mean what torch's parser would make of them."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional, Sequence

import pytest

from torchrun_jsc.request import read_request
from torchrun_jsc.torch_cli import CommandLine, Parsed, TorchCli

from .test_slurm_auto import SCRIPT, step_env


class CountingCli(TorchCli):
    """torch's parser, counting its runs (``parse_args`` calls)."""

    def __init__(self) -> None:
        self.runs = 0

    def parser(self) -> argparse.ArgumentParser:
        parser = super().parser()
        original = parser.parse_args
        cli = self

        def counted(args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:
            cli.runs += 1
            return original(args, namespace)

        parser.parse_args = counted  # type: ignore[method-assign]
        return parser


AUTO = {"TORCHRUN_JSC_SLURM_AUTO": "1", "SLURM_GPUS_ON_NODE": "4"}
MANUAL = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_endpoint=node0i:29500", "--rdzv_id=7"]


@pytest.mark.parametrize(
    ("argv", "env", "added"),
    [
        (SCRIPT, {}, 0),
        ([*MANUAL, *SCRIPT], step_env(), 0),
        (SCRIPT, step_env(**AUTO), 5),
        (["--nnodes=4", *SCRIPT], step_env(**AUTO), 4),
        (["--nproc_per_node=2", "--", *SCRIPT], step_env(**AUTO), 4),
    ],
    ids=["plain", "slurm-manual", "auto-everything", "auto-some", "auto-before-dashdash"],
)
def test_torch_parser_runs_three_times(argv: List[str], env: Dict[str, str], added: int) -> None:
    """Values, given options, one probe of where options go; auto-configuration adds none."""
    cli = CountingCli()
    found = read_request(argv, env, cli)
    assert found.options is not None
    assert len(found.auto.args if found.auto is not None else ()) == added
    assert cli.runs == 3


@pytest.mark.parametrize(
    "argv",
    [SCRIPT, ["--nnodes=2", *SCRIPT], ["--rdzv-backend", "c10d", "--", *SCRIPT], ["-m", "pkg"]],
    ids=["nothing-given", "nnodes-given", "backend-given-dashdash", "module"],
)
def test_auto_values_are_what_torch_parses(argv: List[str]) -> None:
    """The filled-in values equal a parse of the command line with the options inserted."""
    env = step_env(**AUTO)
    found = read_request(argv, env)
    assert found.options is not None and found.auto is not None and found.auto.args
    at = found.insert_at
    filled = CommandLine(env).parse([*argv[:at], *found.auto.args, *argv[at:]])
    assert isinstance(filled, Parsed)
    options = found.options
    assert options.nnodes == filled.values["nnodes"]
    assert options.nproc_per_node == filled.values["nproc_per_node"]
    assert options.rdzv_backend == filled.values["rdzv_backend"]
    assert options.rdzv_endpoint == filled.values["rdzv_endpoint"]
    assert options.rdzv_id == filled.values["rdzv_id"]
    assert options.given == filled.given
