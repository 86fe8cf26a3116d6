"""All versions: the job's first failure. Each node records its first failing worker (or that
torchrun_jsc stopped its workers) in the rendezvous store; every agent ends with one line
naming the job's first failure (:mod:`torchrun_jsc.runtime.records.report`)."""

from __future__ import annotations

from ..runtime.node import Node
from . import _agent_hooks

CHECKS = _agent_hooks.CHECKS


def install(node: Node) -> None:
    """Record failures and print the first one last."""
    _agent_hooks.install()
    _agent_hooks.configure(node, report=True)
