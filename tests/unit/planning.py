"""Planning from a command line and an environment, as the launcher does (no machine looked at).

Also the command lines and version lists the plan's tables (test_plan_*.py) share.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

from torchrun_jsc import lifecycle
from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.plan import Plan, make_plan
from torchrun_jsc.request import Request, read_request
from torchrun_jsc.versions import TESTED_RELEASES

from .layouts import node

SCRIPT = ["train.py", "--lr", "0.1"]
JSC = [
    "--nnodes=4",
    "--nproc_per_node=1",
    "--rdzv_backend=c10d",
    "--rdzv_id=7",
    "--rdzv_endpoint=node0i:29500",
    *SCRIPT,
]
#: Every tested release (the version table's list), and spellings and releases around them:
#: untested minors within the supported range, a pre-release, local version parts and a
#: release newer than every tested one.
ALL_VERSIONS = [
    *TESTED_RELEASES,
    "1.9.0",
    "1.10.2",
    "1.11.0",
    "1.12.1",
    "1.13.0a0",
    "2.11.0+cu130",
    "2.13.0+cpu",
    "3.0.0",
]


def request(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> Request:
    """The request, read with torch's own parser."""
    return read_request(list(argv), dict(env or {}))


def plan(
    argv: Sequence[str] = JSC,
    env: Optional[Mapping[str, str]] = None,
    version: str = "2.13.0",
    facts: Optional[NodeFacts] = None,
) -> Plan:
    """The plan for ``argv`` (default :data:`JSC`) and ``env`` on a node described by ``facts``
    (default node 0)."""
    return make_plan(request(argv, env), version, facts or node(0))


def patch_names(p: Plan) -> Tuple[str, ...]:
    """The patches that fix the start (the agent-side ones are tested in test_lifecycle.py)."""
    return tuple(spec.name for spec in p.patches if spec.name not in lifecycle.PATCHES)


def start_patches(p: Plan) -> list[tuple[str, dict[str, object]]]:
    """The patches that fix the start, with their data."""
    return [(s.name, s.data) for s in p.patches if s.name not in lifecycle.PATCHES]


def script_args(p: Plan) -> list[str]:
    """The training script and its arguments at the end of the plan's command line."""
    return list(p.argv[-len(SCRIPT) :])
