"""The ``jsc`` backend's handler: the launch read back from torch's parsed arguments (found in
the call of ``torch.distributed.run.run``; else the rendezvous parameters alone), planned for
``c10d``, carried out in this process (environment, runtime patches, the job watch), and torch's
own ``c10d`` handler made with the planned rendezvous parameters (endpoint, ``is_host``, this
node's address)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

from ..backend_name import FIRST, NAME
from ..errors import ConfigError
from ..torch_cli import TorchCli

#: The warning when torch's command line is not found (``elastic_launch`` called directly).
PARAMS_ONLY = (
    f"--rdzv-backend={NAME}: torch's command line was not found (the launch did not come"
    " through torch.distributed.run); the rendezvous is planned from its parameters alone,"
    " without the worker count, restarts or script"
)
#: The file of torch's launcher, whose ``run(args)`` holds the parsed command line.
_RUN_FILE = os.path.join("torch", "distributed", "run.py")


def create_handler(params: Any) -> Any:
    """torch's ``c10d`` rendezvous handler for ``params`` (torch's ``RendezvousParameters``),
    with torchrun_jsc's plan for this launch carried out first. A launch the plan refuses ends
    a command-line launcher with one line and exit code 2 (as ``torchrun_jsc`` does); a
    program's own ``elastic_launch`` gets :class:`ConfigError` (a ``ValueError``). With
    ``TORCHRUN_JSC_EXPLAIN`` set, nothing is launched: the explanation (or the refused setting)
    is printed in its format and the launch ends with explain's exit code (``SystemExit``, a
    program's own call too), as ``torchrun_jsc`` does."""
    import torch
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        create_handler as dynamic_handler,
    )

    from .. import log, patches
    from ..apply import carry_out, prepare
    from ..cli import fail, show
    from ..explain import exit_code, render
    from ..settings.table import explain_style
    from ..versions import TorchVersion

    version = TorchVersion.parse(str(torch.__version__))
    if version.key < FIRST:
        raise ConfigError(refusal(str(version)))
    log.setup(os.environ)
    style = explain_style(os.environ)
    cli = TorchCli()
    parser = cli.parser()
    namespace = _launch_arguments()
    try:
        if namespace is not None:
            argv = argv_of(parser, namespace)
        else:
            argv = argv_of_params(params)
            log.logger.warning("torchrun_jsc: %s", PARAMS_ONLY)
        prepared = prepare(argv, os.environ, cli)
    except ConfigError as exc:
        if namespace is None and style is None:
            raise  # a program's own call: its except ValueError decides
        fail(str(exc), style)  # one line (or explain's error) and exit code 2, as torchrun_jsc
    if style is not None:
        # explain asked for: what this node would do, then the exit code explain gives
        show(render(prepared, style))
        raise SystemExit(exit_code(prepared))
    problem = prepared.plan.error or prepared.plan.refusal
    if problem is not None:
        if namespace is None:
            raise ConfigError(problem)
        fail(problem, None)
    if patches.installed():
        patches.restore_all()  # a launch before this one in this process
    carry_out(prepared.plan)
    planned = parser.parse_args(list(prepared.plan.argv))
    fixed = RendezvousParameters(**parameters(planned, params.run_id, params.config, cli))
    backend, store = create_backend(fixed)
    handler = dynamic_handler(store, backend, fixed)
    # torch checks that the handler is of the backend it asked for (its name in its logs too)
    handler.get_backend = lambda: NAME  # type: ignore[method-assign]
    return handler


def refusal(version: str) -> str:
    """The one line for a torch that cannot load the backend."""
    return (
        f"--rdzv-backend={NAME} needs torch >= {FIRST[0]}.{FIRST[1]} (it is loaded from the"
        f" entry points torch reads from then on); torch {version} is installed: launch with"
        f" torchrun_jsc and --rdzv-backend=c10d instead"
    )


def _launch_arguments() -> Optional[argparse.Namespace]:
    """torch's parsed arguments of this launch: the ``args`` of the running call of
    ``torch.distributed.run.run`` (torchrun, accelerate), or None (``elastic_launch`` called
    directly)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        # by file: ``python -m torch.distributed.run`` runs the module as ``__main__``
        if code.co_name == "run" and code.co_filename.endswith(_RUN_FILE):
            found = frame.f_locals.get("args")
            return found if isinstance(found, argparse.Namespace) else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


def argv_of(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> List[str]:
    """The command line that ``parser`` reads as ``namespace``: every option that differs from
    its default, then the training script and its arguments (the plan reads ``jsc`` as the
    backend it stands for)."""
    argv: List[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(namespace, action.dest, action.default)
        if value == action.default or value is None:
            continue
        last = action.option_strings[-1]
        option = last if last.startswith("--") else action.option_strings[0]
        if action.nargs == 0:  # a flag (torch's own ``check_env`` action among them)
            argv.append(option)
        else:
            argv.append(f"{option}={value}")
    script = getattr(namespace, "training_script", None)
    if script is None:
        raise ConfigError("the launch names no training script; accepted: torchrun's arguments")
    return [*argv, str(script), *(str(a) for a in getattr(namespace, "training_script_args", []))]


def argv_of_params(params: Any) -> List[str]:
    """A command line from the rendezvous parameters alone (``elastic_launch`` called without
    torch's command line): the worker count, restarts and script are not known there, so one
    worker and a placeholder program stand for them."""
    # ``rank`` is the static backend's; ``timeout`` torch's launch config adds by itself
    conf = ",".join(
        f"{k}={v}" for k, v in sorted(params.config.items()) if k not in ("rank", "timeout")
    )
    argv = [
        f"--nnodes={params.min_nodes}:{params.max_nodes}",
        f"--rdzv_backend={NAME}",
        f"--rdzv_endpoint={params.endpoint}",
        f"--rdzv_id={params.run_id}",
    ]
    if conf:
        argv.append(f"--rdzv_conf={conf}")
    if params.local_addr:
        argv.append(f"--local_addr={params.local_addr}")
    return [*argv, "--no_python", "true"]


def parameters(
    planned: argparse.Namespace, run_id: str, given: Mapping[str, Any], cli: TorchCli
) -> Dict[str, Any]:
    """The keyword arguments of torch's ``RendezvousParameters`` for the planned command line:
    its endpoint, node counts, address and ``--rdzv_conf`` (over what torch was given)."""
    from ..request import read_rdzv_conf

    low, high = cli.nnodes(planned.nnodes)
    config: Dict[str, Any] = dict(given)
    config.update(read_rdzv_conf(planned.rdzv_conf or ""))
    return {
        "backend": planned.rdzv_backend,
        "endpoint": planned.rdzv_endpoint,
        "run_id": run_id,
        "min_nodes": low,
        "max_nodes": high,
        "local_addr": getattr(planned, "local_addr", None),
        **config,
    }
