"""The thin side-effect layer: gather facts, make the plan, carry it out."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Mapping, MutableMapping, Sequence

from . import facts as facts_mod
from . import patches
from .facts import NodeFacts
from .plan import Plan, endpoint_host, make_plan
from .settings import Settings


def logger() -> logging.Logger:
    """The project's logger: level from ``LOGLEVEL`` (torch elastic's convention, default
    WARNING), printed to stderr."""
    log = logging.getLogger("torchrun_jsc")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False
        level = logging.getLevelName(os.environ.get("LOGLEVEL", "WARNING").upper())
        log.setLevel(level if isinstance(level, int) else logging.WARNING)
    return log


@dataclass(frozen=True)
class Prepared:
    """Everything known before launching: settings, facts and the plan."""

    settings: Settings
    facts: NodeFacts
    plan: Plan


def prepare(argv: Sequence[str], env: Mapping[str, str]) -> Prepared:
    """Validate settings, gather this node's facts and plan (raises ConfigError on bad input)."""
    import torch

    settings = Settings.from_env(env)
    host = endpoint_host(argv, env)
    node = facts_mod.gather(host, settings.resolve_timeout)
    plan = make_plan(argv, env, str(torch.__version__), node)
    return Prepared(settings, node, plan)


def carry_out(plan: Plan, environ: MutableMapping[str, str] = os.environ) -> List[str]:
    """Set the plan's environment and install its patches; log what was done.

    Returns the warnings (plan warnings and declined patches), which are also logged.
    """
    log = logger()
    for key, value in plan.env:
        environ[key] = value
    warnings = list(plan.warnings)
    for spec in plan.patches:
        reason = patches.install(spec.name, spec.kwargs)
        if reason is not None:
            warnings.append(f"patch {spec.name} skipped: {reason}")
    for text in warnings:
        log.warning("torchrun_jsc: %s", text)
    for text in plan.predicted_failures:
        log.warning("torchrun_jsc: this launch will likely fail: %s", text)
    if plan.changes_anything:
        log.info("%s", plan.summary())
    return warnings
