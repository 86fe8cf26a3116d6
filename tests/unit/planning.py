"""Planning from a command line and an environment, as the launcher does (no machine looked at)."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.plan import Plan, make_plan
from torchrun_jsc.request import Request, read_request

from .layouts import node


def request(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> Request:
    """The request, read with torch's own parser."""
    return read_request(list(argv), dict(env or {}))


def plan(
    argv: Sequence[str],
    env: Optional[Mapping[str, str]] = None,
    version: str = "2.13.0",
    facts: Optional[NodeFacts] = None,
) -> Plan:
    """The plan for ``argv`` and ``env`` on a node described by ``facts`` (default node 0)."""
    return make_plan(request(argv, env), version, facts or node(0))
