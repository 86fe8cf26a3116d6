"""Guards: launches that cannot work as started, found before anything runs. Pure.

:func:`findings` runs every guard once; :func:`outcome` is the one mapping of a finding to
what happens. A finding is ``stop`` (the launch cannot work: refused unless
``TORCHRUN_JSC_GUARDS=warn``), ``warn`` (it runs, but probably not as meant) or ``fail`` (it runs
and is predicted to fail or hang: a warning at launch, explain exits 1).
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from . import network, slurm
from .envvars import shown
from .facts import NodeFacts
from .request import SOCKET_IFNAME_VARIABLES, Request
from .settings.table import Settings
from .torch_defaults import JOIN_TIMEOUT, RDZV_HOST

#: What ``TORCHRUN_JSC_GUARDS=warn`` changes, said with every refusal.
WARN_ANYWAY = "TORCHRUN_JSC_GUARDS=warn launches anyway"


class Finding(NamedTuple):
    """One guard's verdict."""

    kind: str  # "stop", "warn" or "fail"
    message: str


class Role(NamedTuple):
    """What the plan decided for this node's rendezvous, for the guards that check it (all
    None when torchrun_jsc leaves the rendezvous to torch)."""

    is_host: Optional[bool] = None
    #: Why ``is_host`` was decided so (the plan's reason).
    host_reason: str = ""
    #: The endpoint is one of this node's addresses.
    endpoint_is_local: Optional[bool] = None
    address: Optional[str] = None
    interface: Optional[str] = None
    #: This node's agent also serves the workers' store (torch 2.6+, group rank 0).
    serves_workers: bool = False


def findings(request: Request, facts: NodeFacts, role: Role) -> List[Finding]:
    """Every guard's findings for this launch, in a fixed order."""
    return [
        *shape_findings(request, facts),
        *port_zero_findings(request),
        *slurm_findings(request),
        *path_findings(request, facts),
        *affinity_findings(request, facts),
        *role_findings(request, facts, role),
        *host_rank_findings(request, role),
        *ifname_findings(request, facts, role),
        *store_host_findings(request, facts, role.is_host, role.serves_workers),
    ]


def outcome(finding: Finding, settings: Settings) -> Tuple[str, str]:
    """``(outcome, message)``: ``refused`` (exit code 2), ``fail`` (a predicted failure) or
    ``warn``; a ``stop`` under ``TORCHRUN_JSC_GUARDS=warn`` is a warning."""
    if finding.kind == "stop":
        if settings.guards == "stop":
            return "refused", f"{finding.message}; {WARN_ANYWAY}"
        return "warn", finding.message
    if finding.kind == "fail":
        return "fail", finding.message
    return "warn", finding.message


def shape_findings(request: Request, facts: NodeFacts) -> List[Finding]:
    """Multi-node launches whose agents can never meet: ``--standalone`` with more than one
    node, and a rendezvous on this machine's loopback (an address, or a name that resolves to
    loopback only here) in a Slurm step over several nodes."""
    options, step = request.options, request.slurm
    if options is None or options.min_nodes < 2:
        return []
    waits = f"each node waits alone until join_timeout ({JOIN_TIMEOUT} s)"
    if options.standalone:
        return [
            Finding(
                "stop",
                f"--standalone with --nnodes={options.nnodes} can never start: --standalone gives"
                f" every agent a rendezvous of its own on a random local port, so no other node"
                f" joins and {waits}; for one node use --nnodes=1, for several drop --standalone"
                " and give --rdzv_backend=c10d and one --rdzv_endpoint",
            )
        ]
    where = _loopback_rendezvous(request, facts)
    if where is None or step is None or not step.in_step or not step.is_multi_node:
        return []
    if step.problem("num_nodes", "tasks_per_node", "node_id", "nodelist") is not None:
        return []  # slurm_findings says that the checks were skipped
    tasks = step.tasks_on_this_node
    if tasks is not None and tasks >= options.min_nodes:
        return []  # several agents here: slurm_findings stops that
    first = slurm.first_host(step.nodelist) if step.nodelist else None
    name = f" (such as {first}, the step's first node)" if first else ""
    return [
        Finding(
            "stop" if tasks is not None else "fail",
            f"--nnodes={options.nnodes} with {where} in a {step.num_nodes}-node Slurm step:"
            f" the agents of the other nodes cannot reach this machine's loopback, so {waits};"
            f" give every node the same --rdzv_endpoint naming one node of the step{name},"
            " or set TORCHRUN_JSC_SLURM_AUTO=1",
        )
    ]


def path_findings(request: Request, facts: NodeFacts) -> List[Finding]:
    """A training script python cannot run on this node, a ``--log_dir`` torch cannot use, and
    ``--numa-binding`` without numactl: every worker, or the agent itself, would stop at once."""
    options = request.options
    if options is None:
        return []
    found: List[Finding] = []
    script = request.script_path
    if script is not None and facts.script_problem is not None:
        found.append(
            Finding(
                "stop",
                f"the training script {shown(script)} {facts.script_problem} on"
                f" {facts.hostname or 'this node'}, so every worker would stop at once; give its"
                " path (relative to the directory torchrun_jsc starts in), or -m for a module,"
                " --no-python for a program",
            )
        )
    if options.log_dir is not None and facts.log_dir_problem is not None:
        found.append(
            Finding(
                "stop",
                f"{options.source('log_dir')} {shown(options.log_dir)} {facts.log_dir_problem},"
                " so torch's agent would stop as it starts; give a directory, or a path that does"
                " not exist yet (torch makes it)",
            )
        )
    if options.numa_binding is not None and facts.numactl is False:
        found.append(
            Finding(
                "stop",
                f"{options.source('numa_binding')}={options.numa_binding}: torch starts every"
                f" worker under numactl, which is not on the PATH of"
                f" {facts.hostname or 'this node'}, so every worker would stop at once; install"
                " numactl there, or leave out --numa-binding",
            )
        )
    return found


def port_zero_findings(request: Request) -> List[Finding]:
    """``--rdzv_endpoint=host:0`` for more than one node: the host's store listens on a port
    the kernel picks, which no other node can know (one node, and ``--standalone``, are fine)."""
    options, endpoint = request.options, request.endpoint
    if options is None or endpoint is None or endpoint.port != 0 or not options.multi_node:
        return []
    fixed = f"--rdzv_endpoint={_bracketed(endpoint.host)}:29500"
    if options.min_nodes < 2:
        return [
            Finding(
                "warn",
                f"--rdzv_endpoint={endpoint.text} with --nnodes={options.nnodes}: port 0 makes the"
                " rendezvous host listen on a port the kernel picks, which no other node can"
                f" know, so this node trains alone; give a fixed port every node uses ({fixed})",
            )
        ]
    return [
        Finding(
            "stop",
            f"--rdzv_endpoint={endpoint.text} with --nnodes={options.nnodes} can never start:"
            " port 0 makes the rendezvous host listen on a port the kernel picks, which no other"
            f" node can know, so each node waits alone until join_timeout ({JOIN_TIMEOUT} s);"
            f" give a fixed port every node uses ({fixed}; port 0 suits one node only)",
        )
    ]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _loopback_rendezvous(request: Request, facts: NodeFacts) -> Optional[str]:
    """How the rendezvous ends up on this machine's loopback (None: it does not)."""
    options = request.options
    assert options is not None
    if options.rdzv_backend == "c10d":
        endpoint = request.endpoint
        if endpoint is None:
            return f"no --rdzv_endpoint (torch uses {RDZV_HOST})"
        if endpoint.is_loopback:
            return f"--rdzv_endpoint={endpoint.text}"
        found = facts.endpoint_addresses
        if (
            facts.endpoint_host == endpoint.host
            and found
            and all(map(network.is_loopback_host, found))
        ):
            return f"--rdzv_endpoint={endpoint.text} (it resolves to {', '.join(found)} here)"
    elif options.rdzv_backend == "static" and not options.rdzv_endpoint:
        loopback = network.is_loopback_host(options.master_addr)
        return f"the static rendezvous on --master_addr={options.master_addr}" if loopback else None
    return None


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
    spares = step.nodes_beyond(options.max_nodes)
    if spares > 0 and not single:
        recovery = request.settings.recovery and request.settings.peer_timeout > 0
        if options.max_restarts == 0 or not recovery:
            why = "--max_restarts=0" if recovery else "recovery off (TORCHRUN_JSC_RECOVERY=0)"
            findings.append(
                Finding(
                    "warn",
                    f"this Slurm step spans {step.num_nodes} nodes for --nnodes="
                    f"{options.nnodes}: {spares} of them will wait as spares, but with {why} a"
                    " lost node stops the job and they never train; allow restarts"
                    " (--max_restarts=3) or start as many tasks as --nnodes",
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


def role_findings(request: Request, facts: NodeFacts, role: Role) -> List[Finding]:
    """This node's decided role against the endpoint's addresses: a host that does not have
    the endpoint's address, or the endpoint's node that will not host."""
    if role.endpoint_is_local is None or request.endpoint is None:
        return []
    host = request.endpoint.host
    if role.is_host and not role.endpoint_is_local:
        return [
            Finding(
                "fail",
                f"this node would host the rendezvous store, but the endpoint {host} "
                f"({', '.join(facts.endpoint_addresses)}) is not one of its addresses",
            )
        ]
    if role.is_host is False and role.endpoint_is_local:
        fix = (
            f"set TORCHRUN_JSC_HOST_NODE_RANK={request.node_rank}"
            if request.node_rank is not None and request.is_host is None
            else "give is_host=1 on this node only"
        )
        return [
            Finding(
                "fail",
                f"the endpoint {host} is an address of this node, but this node will not host "
                f"the store ({role.host_reason}); {fix}",
            )
        ]
    return []


def host_rank_findings(request: Request, role: Role) -> List[Finding]:
    """A host node rank that no node of the job has, when ``is_host`` is decided by node rank:
    no node would host the rendezvous. The job's node ranks are those of its Slurm step, else
    ``--nnodes``' maximum (unless this node's own rank shows that there are spares beyond it)."""
    settings, options = request.settings, request.options
    if options is None or role.endpoint_is_local is None or request.node_rank is None:
        return []
    if request.is_host is not None or not settings.prefer_arg_patching:
        return []  # is_host given, or decided by address
    handed = request.handover
    if handed is not None and handed.host_node_rank is None:
        return []
    step, rank = request.slurm, settings.host_node_rank
    if step is not None and step.in_step and step.num_nodes is not None:
        nodes, where = step.num_nodes, f"this {step.num_nodes}-node Slurm step"
    elif request.node_rank < options.max_nodes:
        nodes, where = options.max_nodes, f"--nnodes={options.nnodes}"
    else:
        return []
    if rank < nodes:
        return []
    name = "TORCHRUN_JSC_HANDOVER's host_node_rank" if handed else "TORCHRUN_JSC_HOST_NODE_RANK"
    return [
        Finding(
            "stop",
            f"{name}={rank} names no node of {where} (node ranks 0..{nodes - 1}): no node would"
            f" host the rendezvous, so each waits until join_timeout ({JOIN_TIMEOUT} s); set it"
            f" to the node rank of the node --rdzv_endpoint names, in 0..{nodes - 1}",
        )
    ]


def ifname_findings(request: Request, facts: NodeFacts, role: Role) -> List[Finding]:
    """The user's ``*_SOCKET_IFNAME`` variables against the interface that reaches the
    endpoint (see :func:`user_ifname_finding`)."""
    if role.interface is None:
        return []
    found: List[Finding] = []
    for name in SOCKET_IFNAME_VARIABLES:
        value = request.env(name)
        if value:
            finding = user_ifname_finding(name, value, role.interface, role.address, facts)
            found += [finding] if finding is not None else []
    return found


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
    """Under Slurm: fewer CPUs than the task asked for (srun without ``--cpus-per-task``:
    Slurm 22.05 to 23.02 does not take it over from sbatch), or fewer than the workers to
    start. Elsewhere nothing: the advice is Slurm's, and the CPUs are the user's own choice."""
    options, step, cpus = request.options, request.slurm, facts.cpus
    if options is None or cpus is None or step is None:
        return []
    asked = step.cpus_per_task if step.problem("cpus_per_task") is None else None
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
