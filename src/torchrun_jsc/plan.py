"""The pure planning step: (request, torch version, node facts) -> :class:`Plan`.

Nothing here touches the machine or reads the environment: the request
(:func:`torchrun_jsc.request.read_request`) already holds every input, validated;
:mod:`torchrun_jsc.apply` carries a plan out. Every decision is recorded with its reason so that
``TORCHRUN_JSC_EXPLAIN`` can show it.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from . import guards, lifecycle, network
from .backend_name import PLANNED_AS
from .decisions import Collector, Decision
from .envvars import shown
from .errors import UnsupportedTorchError
from .facts import NodeFacts
from .patches.params import HostMatcher, PatchSpec, name_of_type
from .request import (
    IGNORED_RDZV_KEYS,
    NPROC_ACCEPTS,
    SOCKET_IFNAME_VARIABLES,
    Request,
    format_rdzv_conf,
)
from .settings.table import Settings
from .versions import (
    Strategy,
    TorchBug,
    TorchVersion,
    bugs_for,
    is_untested,
    newest_tested_label,
    strategy_for,
)

#: A plan's verdicts, best first; a plan's verdict is the worst of its problems' outcomes.
VERDICTS = ("ok", "fail", "refused", "error")


class Problem(NamedTuple):
    """Why this launch cannot work as started. ``outcome``: ``fail`` (it goes ahead, predicted
    to fail or hang: a warning, explain exits 1), ``refused`` (a guard stops it: exit code 2) or
    ``error`` (it cannot be planned, e.g. the endpoint does not resolve: exit code 2)."""

    outcome: str
    message: str


class Plan(NamedTuple):
    """What torchrun_jsc does on this node."""

    torch_version: str
    strategy: str
    argv: Tuple[str, ...]
    added_args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    patches: Tuple[PatchSpec, ...] = ()
    warnings: Tuple[str, ...] = ()
    decisions: Tuple[Decision, ...] = ()
    #: Why the launch cannot work as started: the one place that says so.
    problems: Tuple[Problem, ...] = ()
    is_host: Optional[bool] = None
    advertised_address: Optional[str] = None
    interface: Optional[str] = None

    @property
    def verdict(self) -> str:
        """The worst outcome among the problems (one of :data:`VERDICTS`)."""
        return max((p.outcome for p in self.problems), key=VERDICTS.index, default="ok")

    def _messages(self, outcome: str) -> Tuple[str, ...]:
        return tuple(p.message for p in self.problems if p.outcome == outcome)

    @property
    def predicted_failures(self) -> Tuple[str, ...]:
        """Problems that will make the launch fail or hang."""
        return self._messages("fail")

    @property
    def refusal(self) -> Optional[str]:
        """Why a guard refuses the launch (None when it goes ahead)."""
        return next(iter(self._messages("refused")), None)

    @property
    def error(self) -> Optional[str]:
        """Why the launch cannot be planned (None when it can)."""
        return next(iter(self._messages("error")), None)

    @property
    def changes_anything(self) -> bool:
        """Whether the launch differs from plain torchrun."""
        return bool(self.added_args or self.env or self.patches)

    def summary(self) -> str:
        """One line: what was changed and why (logged at INFO)."""
        parts = [f"torch {self.torch_version} ({self.strategy})"]
        parts += [f"{d.topic}={d.value} ({d.reason})" for d in self.decisions]
        if self.added_args:
            parts.append("added " + " ".join(self.added_args))
        if self.env:
            parts.append("set " + " ".join(f"{k}={v}" for k, v in self.env))
        if self.patches:
            parts.append("patched " + ", ".join(p.name for p in self.patches))
        return "torchrun_jsc: " + "; ".join(parts)


class Prepared(NamedTuple):
    """Everything known before launching: the request, this node's facts and the plan."""

    request: Request
    facts: NodeFacts
    plan: Plan

    @property
    def settings(self) -> Settings:
        """The request's settings."""
        return self.request.settings


class _Draft(Collector):
    """The plan as it is being made."""

    def __init__(self) -> None:
        super().__init__()
        self.args: List[str] = []
        #: How many of ``args`` come before the one ``--rdzv_conf`` (auto-configuration, handover).
        self.front = 0
        self.env: Dict[str, str] = {}
        self.problems: List[Problem] = []
        self.is_host: Optional[bool] = None
        self.address: Optional[str] = None
        self.interface: Optional[str] = None
        #: What the guards check of this node's rendezvous role.
        self.role = guards.Role()


def make_plan(request: Request, torch_version: str, facts: NodeFacts) -> Plan:
    """Decide everything torchrun_jsc does on this node. Pure: same inputs, same plan; it never
    raises for a launch that cannot work, its :attr:`Plan.problems` say why (an ``error`` for
    a torch below 1.9 or an endpoint that does not resolve)."""
    try:
        version = TorchVersion.parse(torch_version)
        strategy = strategy_for(version)
    except UnsupportedTorchError as exc:
        return Plan(
            torch_version=torch_version,
            strategy="unsupported",
            argv=request.argv,
            problems=(Problem("error", str(exc)),),
        )
    draft = _Draft()
    if is_untested(version):
        draft.warnings.append(
            f"torch {version} is newer than every release torchrun_jsc was tested with "
            f"(up to {newest_tested_label()}); using the strategy for {strategy.label}"
        )
    draft.warnings.extend(request.notes)
    _torch_bug_patches(draft, version, request.settings, facts)
    if request.stop is not None or request.options is None:
        draft.decide("launch", "unchanged", "torchrun stops by itself on this command line")
        return _finish(draft, request, version, strategy)
    if request.auto is not None:
        for option, value, reason in request.auto.reasons:
            draft.decide(option, value, f"Slurm auto-configuration: {reason}")
        draft.args.extend(request.auto.args)
    handed = request.handover
    if handed is not None:
        draft.decide(
            "rendezvous handed over",
            handed.host_name,
            f"{handed.lost} was lost; this process continues the job (restart {handed.restart})",
        )
        draft.args.append(f"--rdzv_endpoint={handed.endpoint}")
        if request.options is not None:
            draft.args.append(f"--nnodes={request.options.nnodes}")
            draft.decide(
                "--nnodes",
                request.options.nnodes,
                f"after a handover at least a majority of the last round ({handed.quorum}"
                " nodes), so that a node cut off alone never forms a round of its own",
            )
    if request.own_backend:
        draft.args.append(f"--rdzv_backend={PLANNED_AS}")
        draft.decide(
            "--rdzv_backend",
            PLANNED_AS,
            "the jsc backend is torchrun_jsc's fixes for other launchers; this command applies"
            " them to torch's c10d itself",
        )
    draft.front = len(draft.args)
    _check_nproc_word(draft, request, version, facts)
    fixing = False
    if request.untouched is not None:
        draft.decide("rendezvous", "unchanged", request.untouched)
    else:
        fixing = _fix_rendezvous(draft, request, version, facts)
        if any(p.outcome == "error" for p in draft.problems):
            return _finish(draft, request, version, strategy)
    _apply_guards(draft, request, facts)
    _agent_side(draft, request, version, facts, fixing)
    return _finish(draft, request, version, strategy)


def _agent_side(
    draft: _Draft, request: Request, version: TorchVersion, facts: NodeFacts, fixing: bool
) -> None:
    lifecycle.plan_agent_side(
        draft, request, version, facts, draft.is_host, fixing, address=draft.address
    )
    if draft.conf:  # after the auto-configured options and the handover, before --local_addr
        draft.args.insert(
            draft.front, f"--rdzv_conf={format_rdzv_conf({**request.conf, **draft.conf})}"
        )


def _check_nproc_word(
    draft: _Draft, request: Request, version: TorchVersion, facts: NodeFacts
) -> None:
    """``--nproc_per_node=gpu`` (or another word) that torch refuses on this node."""
    word, refused = request.nproc_word, facts.local_world_size_error
    if word is None or refused is None or request.options is None:
        return
    if "not available" in refused:
        device = {"gpu": "CUDA", "xpu": "XPU"}.get(word, word)
        reason = f"this node has no {device} device"
    elif "Unsupported" in refused:
        reason = f"torch {version} knows no such device"
    else:
        reason = f"torch: {shown(refused)}"
    source = request.options.source("nproc_per_node")
    message = f"{source}={shown(word)} is not valid: {reason}; accepted: {NPROC_ACCEPTS}"
    draft.problems.append(Problem("error", message))


def _apply_guards(draft: _Draft, request: Request, facts: NodeFacts) -> None:
    """Every guard, once; each finding becomes a warning or a problem (guards.outcome)."""
    for finding in guards.findings(request, facts, draft.role):
        outcome, message = guards.outcome(finding, request.settings)
        if outcome == "warn":
            draft.warnings.append(message)
        else:
            draft.problems.append(Problem(outcome, message))


def _torch_bug_patches(
    draft: _Draft, version: TorchVersion, settings: Settings, facts: NodeFacts
) -> None:
    for bug in bugs_for(version, facts.python_version):
        if bug.patch is None or bug.multi_node_only:
            continue  # multi-node launches only (_torch_bug_variables)
        _bug_patch(draft, bug, settings)


def _bug_patch(draft: _Draft, bug: TorchBug, settings: Settings) -> None:
    assert bug.patch is not None
    if settings.fix_torch_bugs:
        draft.patches.append(PatchSpec(bug.patch(), reason=bug.fixes))
    else:
        draft.warnings.append(f"{bug.left}; TORCHRUN_JSC_FIX_TORCH_BUGS=0 leaves it so")


def _torch_bug_variables(
    draft: _Draft, request: Request, version: TorchVersion, facts: NodeFacts
) -> None:
    """Bugs only multi-node launches meet: worked around by a variable torch itself reads
    (its shared store), or by a patch (spares)."""
    for bug in bugs_for(version, facts.python_version):
        if bug.restarts_only and (request.options is None or request.options.max_restarts == 0):
            continue
        if bug.patch is not None:
            if bug.multi_node_only:
                _bug_patch(draft, bug, request.settings)
            continue
        assert bug.env is not None
        name, value = bug.env
        if request.env(name):
            continue
        if not request.settings.fix_torch_bugs:
            draft.warnings.append(f"{bug.left}; TORCHRUN_JSC_FIX_TORCH_BUGS=0 leaves {name} unset")
            continue
        draft.env[name] = value
        draft.decide(name, value, bug.fixes)


def _fix_rendezvous(
    draft: _Draft, request: Request, version: TorchVersion, facts: NodeFacts
) -> bool:
    """Decide host, address and interfaces; True when this node's rendezvous is fixed (False:
    the endpoint resolves to loopback only, so it is left alone)."""
    assert request.endpoint is not None and request.options is not None
    host = request.endpoint.host
    conf = request.conf
    settings = request.settings
    for key, instead in IGNORED_RDZV_KEYS.items():
        if key in conf:
            draft.warnings.append(
                f"--rdzv_conf {key}={conf[key]} is ignored by torch's c10d rendezvous; "
                f"use {instead}"
            )
    if facts.resolve_error is not None or not facts.endpoint_addresses:
        draft.problems.append(
            Problem(
                "error",
                f"--rdzv_endpoint host {host!r} does not resolve on"
                f" {facts.hostname or 'this node'} ({facts.resolve_error or 'no address'}) after"
                f" {settings.resolve_timeout:g} s; accepted: a name or address every node can"
                " resolve",
            )
        )
        return False
    if all(network.is_loopback_host(a) for a in facts.endpoint_addresses):
        draft.decide(
            "rendezvous", "unchanged", f"endpoint {host} resolves to loopback addresses only"
        )
        return False
    local = bool(facts.local_endpoint_addresses)
    _decide_is_host(draft, request, local)
    _decide_address(draft, request, strategy_for(version), facts)
    _decide_ifname(draft, request)
    _torch_bug_variables(draft, request, version, facts)
    draft.role = guards.Role(
        is_host=draft.is_host,
        host_reason=next((d.reason for d in draft.decisions if d.topic == "is_host"), ""),
        endpoint_is_local=local,
        address=draft.address,
        interface=draft.interface,
        # node rank 0 is group rank 0 in node order; its agent may serve the workers' store
        serves_workers=strategy_for(version).agent_serves_worker_store and request.node_rank == 0,
    )
    return request.options.multi_node


def _decide_is_host(draft: _Draft, request: Request, local: bool) -> None:
    assert request.endpoint is not None
    host, settings = request.endpoint.host, request.settings
    if request.is_host is not None:
        draft.is_host = request.is_host
        draft.decide("is_host", int(draft.is_host), "given by the user; kept")
        return
    if not settings.prefer_arg_patching:
        draft.is_host = local
        draft.patches.append(
            PatchSpec(
                HostMatcher(host=host, is_local=local), reason="TORCHRUN_JSC_PREFER_ARG_PATCHING=0"
            )
        )
        draft.decide(
            "is_host",
            int(local),
            f"host recognition patched: {host} {'is' if local else 'is not'} an address of this"
            " node",
        )
        return
    by_address = request.handover is not None and request.handover.host_node_rank is None
    if request.node_rank is not None and not by_address:
        is_host = request.node_rank == settings.host_node_rank
        reason = (
            f"node rank {request.node_rank} (from {request.node_rank_source}) "
            f"{'==' if is_host else '!='} host node rank {settings.host_node_rank}"
        )
    elif settings.host_by_address or by_address:
        is_host = local
        reason = f"{host} {'is' if local else 'is not'} an address of this node"
    else:
        draft.decide("is_host", "torch's guess", "no node rank and TORCHRUN_JSC_HOST_BY_ADDRESS=0")
        return
    draft.is_host = is_host
    draft.conf["is_host"] = "1" if is_host else "0"
    draft.decide("is_host", int(is_host), reason)


def _decide_address(draft: _Draft, request: Request, strategy: Strategy, facts: NodeFacts) -> None:
    assert request.options is not None
    settings, given = request.settings, request.options.local_addr
    address, how = _own_address(facts)
    if address is not None:
        draft.address = address
        draft.interface = facts.interface_of(address)
    if given is not None:
        _check_local_addr(draft, given, facts)
    if given is not None and strategy.local_addr_arg:
        draft.decide("advertised address", given, "--local_addr given by the user; kept")
        return
    if not settings.advertise_own_address:
        draft.decide(
            "advertised address", "torch's default", "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS=0"
        )
        return
    if given is not None:
        # A torch that takes --local_addr but ignores it for MASTER_ADDR (2.4): honour it.
        address, how = given, "--local_addr given by the user"
    elif address is None:
        draft.problems.append(
            Problem(
                "fail",
                f"no route from this node to the endpoint ({', '.join(facts.endpoint_addresses)})",
            )
        )
        return
    if strategy.local_addr_arg and not settings.prefer_old_solution:
        draft.args.append(f"--local_addr={address}")
        mechanism = "--local_addr"
    else:
        draft.patches.append(
            PatchSpec(
                strategy.advertise_patch(address=address),
                reason=f"torch {strategy.label}: {strategy.master_addr}",
            )
        )
        mechanism = f"patch {name_of_type(strategy.advertise_patch)}"
    draft.decide("advertised address", address, f"{how}; via {mechanism}")


def _check_local_addr(draft: _Draft, given: str, facts: NodeFacts) -> None:
    """A ``--local_addr`` of the user's is kept; warn when it cannot be this node's address."""
    kept = "kept as given, but the other nodes cannot reach this node by it"
    if facts.local_addr_error is not None:
        draft.warnings.append(
            f"--local_addr {shown(given)} does not resolve on {facts.hostname or 'this node'}"
            f" ({facts.local_addr_error}); {kept}"
        )
    elif facts.local_addr_addresses and not facts.local_addr_own:
        draft.warnings.append(
            f"--local_addr {shown(given)} ({', '.join(facts.local_addr_addresses)}) is not an"
            f" address of {facts.hostname or 'this node'}; {kept}"
        )


def _own_address(facts: NodeFacts) -> Tuple[Optional[str], str]:
    for address in facts.endpoint_addresses:
        if address in facts.local_endpoint_addresses:
            return address, "the endpoint address is this node's"
    for address in facts.endpoint_addresses:
        source = facts.route_sources.get(address)
        if source:
            return source, f"this node's source address towards {address}"
    return None, ""


def _decide_ifname(draft: _Draft, request: Request) -> None:
    if draft.interface is None:
        return
    for name in SOCKET_IFNAME_VARIABLES:
        value = request.env(name)
        if value:
            draft.decide(name, value, "set by the user; kept")  # checked by the guards
        elif request.settings.set_socket_ifname:
            draft.env[name] = draft.interface
            draft.decide(name, draft.interface, f"the interface of {draft.address}")


def _finish(draft: _Draft, request: Request, version: TorchVersion, strategy: Strategy) -> Plan:
    argv = list(request.argv)
    if draft.args and request.options is not None:
        at = request.insert_at
        argv[at:at] = draft.args
    return Plan(
        torch_version=str(version),
        strategy=strategy.label,
        argv=tuple(argv),
        added_args=tuple(draft.args),
        env=tuple(sorted(draft.env.items())),
        patches=tuple(draft.patches),
        warnings=tuple(draft.warnings),
        decisions=tuple(draft.decisions),
        problems=tuple(draft.problems),
        is_host=draft.is_host,
        advertised_address=draft.address,
        interface=draft.interface,
    )
