"""Guards: launches that cannot work as started, found before anything runs. Pure.

Each finding is ``stop`` (the launch cannot work: refused unless ``TORCHRUN_JSC_GUARDS=warn``),
``warn`` (it runs, but probably not as meant) or ``fail`` (a predicted failure: explain exits 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from .facts import NodeFacts
from .request import Request

SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class Finding:
    """One guard's verdict."""

    kind: str  # "stop", "warn" or "fail"
    message: str


def slurm_findings(request: Request) -> List[Finding]:
    """How the launch fits the Slurm step it runs in."""
    step, options = request.slurm, request.options
    if step is None or options is None:
        return []
    problem = step.problem("num_nodes", "tasks_per_node", "node_id", "nodelist")
    if problem is not None:  # only an untouched launch gets here with a bad variable
        return [Finding("warn", f"Slurm launch checks skipped: {problem}")]
    findings: List[Finding] = []
    single = options.standalone or options.max_nodes == 1
    if step.in_step and step.is_multi_node and single:
        findings.append(
            Finding(
                "warn",
                f"this Slurm step spans {step.num_nodes} nodes but torchrun is set up for one node"
                f" ({'--standalone' if options.standalone else '--nnodes=' + options.nnodes}):"
                f" {step.num_nodes} independent jobs will run; for one job use"
                f" --nnodes={step.num_nodes} --rdzv_backend=c10d and one --rdzv_endpoint"
                " (or TORCHRUN_JSC_SLURM_AUTO=1)",
            )
        )
    tasks = step.tasks_on_this_node
    if step.in_step and tasks is not None and tasks > 1 and not single:
        findings.append(
            Finding(
                "stop",
                f"{tasks} Slurm tasks on this node would each start a torchrun agent; start one"
                " task per node (srun --ntasks-per-node=1): torchrun starts the workers",
            )
        )
    if not step.in_step and step.is_multi_node and options.min_nodes > 1:
        findings.append(
            Finding(
                "stop",
                f"started outside srun in a {step.num_nodes}-node allocation: only this node runs"
                f" an agent and --nnodes={options.nnodes} is never reached; start it as"
                " srun --ntasks-per-node=1 torchrun_jsc ...",
            )
        )
    return findings


def ifname_selects(variable: str, value: str, interface: str) -> bool:
    """Whether ``variable=value`` lets gloo/NCCL use ``interface`` (NCCL: prefixes, ``^``
    excludes, ``=`` exact; gloo: exact names)."""
    if variable.startswith("GLOO"):
        return interface in [v.strip() for v in value.split(",")]
    text, exact, exclude = value, False, False
    if text.startswith("^"):
        text, exclude = text[1:], True
    if text.startswith("="):
        text, exact = text[1:], True
    names = [v.strip() for v in text.split(",") if v.strip()]
    hit = any(interface == n if exact else interface.startswith(n) for n in names)
    return not hit if exclude else hit


def user_ifname_finding(
    name: str, value: str, interface: str, address: Optional[str], facts: NodeFacts
) -> Optional[Finding]:
    """A user's ``*_SOCKET_IFNAME`` that does not select the interface reaching the endpoint:
    gloo then fails (a predicted failure), NCCL only loses its socket path (a warning)."""
    if ifname_selects(name, value, interface):
        return None
    known = sorted({i.name for i in facts.interfaces})
    message = (
        f"{name}={value} does not select {interface}, the interface that reaches the "
        f"endpoint ({address}); interfaces here: {', '.join(known)}; unset it or set "
        f"{name}={interface}"
    )
    return Finding("fail" if name.startswith("GLOO") else "warn", message)
