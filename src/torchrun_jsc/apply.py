"""The thin side-effect layer: read the request, gather facts, plan, carry the plan out."""

from __future__ import annotations

import os
from typing import List, Mapping, MutableMapping, Optional, Sequence

from . import facts as facts_mod
from . import patches
from .log import logger
from .plan import Plan, Prepared, make_plan
from .request import read_request
from .torch_cli import TorchCli


def prepare(
    argv: Sequence[str], env: Mapping[str, str], cli: Optional[TorchCli] = None
) -> Prepared:
    """Read the request (raises ConfigError on bad input), gather this node's facts, plan."""
    import torch

    request = read_request(argv, env, cli)
    options = request.options
    node = facts_mod.gather(
        request.lookup_host,
        request.settings.resolve_timeout,
        local_addr=options.local_addr if options is not None else None,
        nproc_word=request.nproc_word,
        cli=cli,
        script=request.script_path,
        log_dir=options.log_dir if options is not None else None,
        numa=options is not None and options.numa_binding is not None,
        events=request.settings.events,
    )
    plan = make_plan(request, str(torch.__version__), node)
    return Prepared(request, node, plan)


def carry_out(plan: Plan, environ: MutableMapping[str, str] = os.environ) -> List[str]:
    """Set the plan's environment and install its patches; log what was done.

    Returns the warnings (plan warnings and declined patches), which are also logged.
    """
    for key, value in plan.env:
        environ[key] = value
    warnings = list(plan.warnings)
    for spec in plan.patches:
        reason = patches.install(spec.params)
        if reason is not None:
            warnings.append(f"patch {spec.name} skipped: {reason}")
    for text in warnings:
        logger.warning("torchrun_jsc: %s", text)
    for text in plan.predicted_failures:
        logger.warning("torchrun_jsc: this launch will likely fail: %s", text)
    if plan.changes_anything:
        logger.info("%s", plan.summary())
    return warnings
