"""Guards: launches that cannot work as started, found before anything runs. Pure.

Each finding is ``stop`` (the launch cannot work: refused unless ``TORCHRUN_JSC_GUARDS=warn``),
``warn`` (it runs, but probably not as meant) or ``fail`` (a predicted failure: explain exits 1).
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional

from .facts import NodeFacts
from .request import Request

SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


class Finding(NamedTuple):
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
        f"{name}={value} does not select {interface}, the interface of {address} (this node's"
        f" address towards the endpoint {facts.endpoint_host}); interfaces here:"
        f" {', '.join(known)}; unset it or set {name}={interface}"
    )
    return Finding("fail" if name.startswith("GLOO") else "warn", message)


def affinity_findings(request: Request, facts: NodeFacts) -> List[Finding]:
    """Fewer CPUs than the task asked for (srun without ``--cpus-per-task``: Slurm 22.05 to
    23.02 does not take it over from sbatch), or fewer than the workers to start."""
    options, step, cpus = request.options, request.slurm, facts.cpus
    if options is None or cpus is None:
        return []
    asked = (
        step.cpus_per_task if step is not None and step.problem("cpus_per_task") is None else None
    )
    if asked is not None and cpus < asked:
        return [
            Finding(
                "warn",
                f"this Slurm task may use {cpus} CPU{'s' if cpus != 1 else ''} although"
                f" SLURM_CPUS_PER_TASK={asked}: srun did not take --cpus-per-task over from the"
                " job, and every worker of this node shares them; export"
                ' SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK" before srun (or srun'
                f" --cpus-per-task={asked})",
            )
        ]
    workers = int(options.nproc_per_node) if options.nproc_per_node.isdigit() else None
    if workers is not None and cpus < workers:
        return [
            Finding(
                "warn",
                f"{workers} workers will share {cpus} CPU{'s' if cpus != 1 else ''} (this task's"
                " CPU affinity); give the task the node's CPUs (sbatch --cpus-per-task, and"
                ' SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK" or srun --cpus-per-task)',
            )
        ]
    return []


#: File descriptors an agent needs beyond its connections (torch, logs, pipes).
FD_MARGIN = 64


def store_host_findings(
    request: Request, facts: NodeFacts, is_host: Optional[bool], serves_workers: bool
) -> List[Finding]:
    """Limits of the node that serves the rendezvous store that are too small for the job:
    the listen backlog (``net.core.somaxconn``) and the open-file limit (``ulimit -n``)."""
    options = request.options
    if not is_host or options is None or not options.multi_node:
        return []
    nodes = options.max_nodes
    findings: List[Finding] = []
    if facts.somaxconn is not None and facts.somaxconn < nodes:
        findings.append(
            Finding(
                "warn",
                f"net.core.somaxconn={facts.somaxconn} on this node, which serves the rendezvous"
                f" store for up to {nodes} nodes: connections beyond {facts.somaxconn} at once"
                f" wait for TCP retries; raise it to at least {nodes}"
                f" (sysctl -w net.core.somaxconn={nodes})",
            )
        )
    per_node = 2 if request.settings.peer_timeout > 0 or request.settings.failure_report else 1
    workers = int(options.nproc_per_node) if options.nproc_per_node.isdigit() else 8
    needed = nodes * (per_node + (workers if serves_workers else 0)) + FD_MARGIN
    if facts.open_files is not None and facts.open_files < needed:
        findings.append(
            Finding(
                "warn",
                f"ulimit -n is {facts.open_files} on this node, which serves the rendezvous store"
                f" for up to {nodes} nodes and needs about {needed} open files; raise it"
                f" (ulimit -n {needed} before starting torchrun_jsc)",
            )
        )
    return findings
