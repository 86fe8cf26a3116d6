"""The pure planning step: (argv, environment, torch version, node facts) -> :class:`Plan`.

Nothing here touches the machine; :mod:`torchrun_jsc.apply` carries a plan out. Every decision
is recorded with its reason so that ``TORCHRUN_JSC_EXPLAIN`` can show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import autoconfig, launch_args, network, slurm
from .errors import ConfigError
from .facts import NodeFacts
from .launch_args import LaunchArgs, Parser
from .settings import Settings
from .versions import (
    PATCH_HOST_MATCHER,
    Strategy,
    TorchVersion,
    bugs_for,
    is_untested,
    newest_tested_label,
    strategy_for,
)

SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
#: Rendezvous keys that the c10d handler silently ignores, with the key to use instead.
IGNORED_RDZV_KEYS = {"timeout": "join_timeout (and read_timeout for the store)"}


@dataclass(frozen=True)
class PatchSpec:
    """A runtime patch to install: its module name in :mod:`torchrun_jsc.patches` and arguments."""

    name: str
    params: Tuple[Tuple[str, object], ...] = ()
    reason: str = ""

    @property
    def kwargs(self) -> Dict[str, object]:
        """``params`` as a dict."""
        return dict(self.params)


@dataclass(frozen=True)
class Decision:
    """One line of the plan's reasoning: what was decided and why."""

    topic: str
    value: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """What torchrun_jsc does on this node."""

    torch_version: str
    strategy: str
    argv: Tuple[str, ...]
    added_args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    patches: Tuple[PatchSpec, ...] = ()
    warnings: Tuple[str, ...] = ()
    decisions: Tuple[Decision, ...] = ()
    #: Problems that will make the launch fail or hang (explain exits non-zero on any).
    predicted_failures: Tuple[str, ...] = ()
    is_host: Optional[bool] = None
    advertised_address: Optional[str] = None
    interface: Optional[str] = None

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


@dataclass
class _Draft:
    argv: List[str]
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    patches: List[PatchSpec] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    decisions: List[Decision] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    is_host: Optional[bool] = None
    address: Optional[str] = None
    interface: Optional[str] = None

    def decide(self, topic: str, value: object, reason: str) -> None:
        self.decisions.append(Decision(topic, str(value), reason))


def make_plan(
    argv: Sequence[str],
    env: Mapping[str, str],
    torch_version: str,
    facts: NodeFacts,
    parser: Optional[Parser] = None,
) -> Plan:
    """Decide everything torchrun_jsc does on this node. Pure: same inputs, same plan.

    Raises :class:`ConfigError` for bad settings or arguments and
    :class:`~torchrun_jsc.errors.UnsupportedTorchError` below torch 1.9.
    """
    settings = Settings.from_env(env)
    version = TorchVersion.parse(torch_version)
    strategy = strategy_for(version)
    draft = _Draft(argv=list(argv))
    if is_untested(version):
        draft.warnings.append(
            f"torch {version} is newer than every release torchrun_jsc was tested with "
            f"(up to {newest_tested_label()}); using the strategy for {strategy.label}"
        )
    _torch_bug_workarounds(draft, version, strategy, settings, facts)
    step = slurm.SlurmStep.from_env(env)
    effective = _effective(argv, env, settings, step, parser)
    args, original = effective.args, effective.original
    if effective.auto_skipped:
        draft.warnings.append(effective.auto_skipped)
    if effective.auto is not None:
        for option, value, reason in effective.auto.reasons:
            draft.decide(option, value, f"Slurm auto-configuration: {reason}")
        draft.args.extend(effective.auto.args)
    if args is None:
        draft.decide("launch", "unchanged", "torchrun stops on this command line by itself")
    else:
        _guards(draft, step, args, settings)
        if _needs_fixing(draft, args):
            _fix_rendezvous(draft, args, env, settings, version, facts)
    return _finish(draft, version, strategy, original)


@dataclass(frozen=True)
class _Effective:
    original: Optional[LaunchArgs]
    args: Optional[LaunchArgs]
    auto: Optional[autoconfig.AutoArgs] = None
    auto_skipped: Optional[str] = None


def _effective(
    argv: Sequence[str],
    env: Mapping[str, str],
    settings: Settings,
    step: Optional[slurm.SlurmStep],
    parser: Optional[Parser],
) -> _Effective:
    """The command line as torchrun will see it after Slurm auto-configuration."""
    original = launch_args.parse(argv, env, parser)
    if original is None or not settings.slurm_auto:
        return _Effective(original, original)
    if step is None or not step.in_step:
        return _Effective(
            original,
            original,
            auto_skipped="TORCHRUN_JSC_SLURM_AUTO=1 outside a Slurm step (srun): nothing filled in",
        )
    given = launch_args.given_options(argv, env) or frozenset()
    auto = autoconfig.slurm_args(step, given, original.rdzv_backend, settings.host_suffix)
    filled = list(argv)
    filled[original.script_index : original.script_index] = auto.args
    return _Effective(original, launch_args.parse(filled, env, parser), auto)


def nnodes_range(text: str) -> Optional[Tuple[int, int]]:
    """``--nnodes`` as ``(min, max)``; None when torch would reject it."""
    try:
        low, _, high = text.partition(":")
        return int(low), int(high or low)
    except ValueError:
        return None


def _guard(draft: _Draft, settings: Settings, message: str) -> None:
    if settings.guards == "stop":
        raise ConfigError(f"{message}; TORCHRUN_JSC_GUARDS=warn launches anyway")
    draft.warnings.append(message)


def _guards(
    draft: _Draft, step: Optional[slurm.SlurmStep], args: LaunchArgs, settings: Settings
) -> None:
    if step is None:
        return
    nodes = nnodes_range(args.nnodes) or (1, 1)
    single = args.standalone or nodes[1] == 1
    if step.in_step and step.is_multi_node and single:
        draft.warnings.append(
            f"this Slurm step spans {step.num_nodes} nodes but torchrun is set up for one node "
            f"({'--standalone' if args.standalone else '--nnodes=' + args.nnodes}): "
            f"{step.num_nodes} independent jobs will run; for one job use "
            f"--nnodes={step.num_nodes} --rdzv_backend=c10d and one --rdzv_endpoint "
            "(or TORCHRUN_JSC_SLURM_AUTO=1)"
        )
    tasks = step.tasks_on_this_node
    if step.in_step and tasks is not None and tasks > 1 and not single:
        _guard(
            draft,
            settings,
            f"{tasks} Slurm tasks on this node would each start a torchrun agent; start one "
            "task per node (srun --ntasks-per-node=1): torchrun starts the workers",
        )
    if not step.in_step and step.is_multi_node and nodes[0] > 1:
        _guard(
            draft,
            settings,
            f"started outside srun in a {step.num_nodes}-node allocation: only this node runs "
            f"an agent and --nnodes={args.nnodes} is never reached; start it as "
            "srun --ntasks-per-node=1 torchrun_jsc ...",
        )


def _torch_bug_workarounds(
    draft: _Draft,
    version: TorchVersion,
    strategy: Strategy,
    settings: Settings,
    facts: NodeFacts,
) -> None:
    for bug in bugs_for(version, facts.python_version):
        if bug.patch is None:
            continue  # an environment workaround: multi-node launches only (_fix_rendezvous)
        if settings.fix_torch_bugs:
            draft.patches.append(PatchSpec(bug.patch, reason=bug.fixes))
        else:
            draft.warnings.append(f"{bug.left}; TORCHRUN_JSC_FIX_TORCH_BUGS=0 leaves it so")


def _needs_fixing(draft: _Draft, args: LaunchArgs) -> bool:
    if args.standalone:
        draft.decide("rendezvous", "unchanged", "--standalone runs on this node only")
        return False
    if args.rdzv_backend != "c10d":
        draft.decide("rendezvous", "unchanged", f"backend {args.rdzv_backend!r} is not c10d")
        return False
    if not args.rdzv_endpoint:
        draft.decide("rendezvous", "unchanged", "no --rdzv_endpoint: torch uses localhost")
        return False
    host, _ = network.split_endpoint(args.rdzv_endpoint)
    if network.is_loopback_host(host):
        draft.decide("rendezvous", "unchanged", f"endpoint {host} is this machine's loopback")
        return False
    if args.script_index < 0:
        draft.warnings.append(
            "cannot find the training script in the command line; arguments left unchanged"
        )
        return False
    return True


def endpoint_host(
    argv: Sequence[str], env: Mapping[str, str], parser: Optional[Parser] = None
) -> Optional[str]:
    """The endpoint host whose facts the plan will need, or None when it needs none.

    Validates, before any look-up, every input that needs none (settings, endpoint syntax,
    rendezvous configuration), raising :class:`ConfigError` as :func:`make_plan` would.
    """
    settings = Settings.from_env(env)
    args = _effective(argv, env, settings, slurm.SlurmStep.from_env(env), parser).args
    if args is None:
        return None
    if args.rdzv_backend == "c10d":
        conf = launch_args.parse_rdzv_conf(args.rdzv_conf)
        if "is_host" in conf:
            launch_args.parse_torch_bool("is_host", conf["is_host"])
    if not _needs_fixing(_Draft(argv=[]), args):
        return None
    host, _ = network.split_endpoint(args.rdzv_endpoint)
    return host


def _fix_rendezvous(
    draft: _Draft,
    args: LaunchArgs,
    env: Mapping[str, str],
    settings: Settings,
    version: TorchVersion,
    facts: NodeFacts,
) -> None:
    strategy = strategy_for(version)
    host, _ = network.split_endpoint(args.rdzv_endpoint)
    conf = launch_args.parse_rdzv_conf(args.rdzv_conf)
    for key, instead in IGNORED_RDZV_KEYS.items():
        if key in conf:
            draft.warnings.append(
                f"--rdzv_conf {key}={conf[key]} is ignored by torch's c10d rendezvous; "
                f"use {instead}"
            )
    if "is_host" in conf:
        launch_args.parse_torch_bool("is_host", conf["is_host"])
    if facts.resolve_error is not None or not facts.endpoint_addresses:
        raise ConfigError(
            f"--rdzv_endpoint host {host!r} does not resolve on {facts.hostname or 'this node'}"
            f" ({facts.resolve_error or 'no address'}) after "
            f"{settings.resolve_timeout:g} s; accepted: a name or address every node can resolve"
        )
    if all(_is_loopback(a) for a in facts.endpoint_addresses):
        draft.decide(
            "rendezvous", "unchanged", f"endpoint {host} resolves to loopback addresses only"
        )
        return
    local = bool(facts.local_endpoint_addresses)
    user_is_host = conf.get("is_host")
    _decide_is_host(draft, conf, settings, host, local)
    _decide_address(draft, args, settings, strategy, facts)
    if draft.is_host and not local:
        draft.failures.append(
            f"this node would host the rendezvous store, but the endpoint {host} "
            f"({', '.join(facts.endpoint_addresses)}) is not one of its addresses"
        )
    if draft.is_host is False and local:
        why = next(d.reason for d in draft.decisions if d.topic == "is_host")
        fix = (
            f"set TORCHRUN_JSC_HOST_NODE_RANK={settings.node_rank}"
            if settings.node_rank is not None and user_is_host is None
            else "give is_host=1 on this node only"
        )
        draft.failures.append(
            f"the endpoint {host} is an address of this node, but this node will not host "
            f"the store ({why}); {fix}"
        )
    _decide_ifname(draft, env, settings, facts)
    _env_bug_workarounds(draft, env, settings, version, facts)


def _decide_is_host(
    draft: _Draft, conf: Dict[str, str], settings: Settings, host: str, local: bool
) -> None:
    if "is_host" in conf:
        draft.is_host = launch_args.parse_torch_bool("is_host", conf["is_host"])
        draft.decide("is_host", int(draft.is_host), "given by the user; kept")
        return
    if not settings.prefer_arg_patching:
        draft.is_host = local
        draft.patches.append(
            PatchSpec(
                PATCH_HOST_MATCHER,
                (("host", host), ("is_local", local)),
                reason="TORCHRUN_JSC_PREFER_ARG_PATCHING=0",
            )
        )
        draft.decide(
            "is_host",
            int(local),
            f"host recognition patched: {host} {'is' if local else 'is not'} an address of this"
            " node",
        )
        return
    if settings.node_rank is not None:
        is_host = settings.node_rank == settings.host_node_rank
        reason = (
            f"node rank {settings.node_rank} (from {settings.node_rank_source}) "
            f"{'==' if is_host else '!='} host node rank {settings.host_node_rank}"
        )
    elif settings.host_by_address:
        is_host = local
        reason = f"{host} {'is' if local else 'is not'} an address of this node"
    else:
        draft.decide("is_host", "torch's guess", "no node rank and TORCHRUN_JSC_HOST_BY_ADDRESS=0")
        return
    draft.is_host = is_host
    conf["is_host"] = "1" if is_host else "0"
    draft.args.append(f"--rdzv_conf={launch_args.format_rdzv_conf(conf)}")
    draft.decide("is_host", int(is_host), reason)


def _decide_address(
    draft: _Draft, args: LaunchArgs, settings: Settings, strategy: Strategy, facts: NodeFacts
) -> None:
    address, how = _own_address(facts)
    if address is not None:
        draft.address = address
        draft.interface = facts.interface_of(address)
    if args.local_addr is not None and strategy.local_addr_arg:
        draft.decide("advertised address", args.local_addr, "--local_addr given by the user; kept")
        return
    if not settings.advertise_own_address:
        draft.decide(
            "advertised address", "torch's default", "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS=0"
        )
        return
    if args.local_addr is not None:
        # A torch that takes --local_addr but ignores it for MASTER_ADDR (2.4): honour it.
        address, how = args.local_addr, "--local_addr given by the user"
    elif address is None:
        draft.failures.append(
            f"no route from this node to the endpoint ({', '.join(facts.endpoint_addresses)})"
        )
        return
    if strategy.local_addr_arg and not settings.prefer_old_solution:
        draft.args.append(f"--local_addr={address}")
        mechanism = "--local_addr"
    else:
        draft.patches.append(
            PatchSpec(
                strategy.advertise_patch,
                (("address", address),),
                reason=f"torch {strategy.label}: {strategy.master_addr}",
            )
        )
        mechanism = f"patch {strategy.advertise_patch}"
    draft.decide("advertised address", address, f"{how}; via {mechanism}")


def _is_loopback(address: str) -> bool:
    ip = network.ip_of(address)
    return ip is not None and ip.is_loopback


def _own_address(facts: NodeFacts) -> Tuple[Optional[str], str]:
    for address in facts.endpoint_addresses:
        if address in facts.local_endpoint_addresses:
            return address, "the endpoint address is this node's"
    for address in facts.endpoint_addresses:
        source = facts.route_sources.get(address)
        if source:
            return source, f"this node's source address towards {address}"
    return None, ""


def _decide_ifname(
    draft: _Draft, env: Mapping[str, str], settings: Settings, facts: NodeFacts
) -> None:
    if draft.interface is None:
        return
    for name in SOCKET_IFNAME_VARIABLES:
        value = env.get(name, "")
        if value:
            draft.decide(name, value, "set by the user; kept")
            _check_user_ifname(draft, name, value, facts)
        elif settings.set_socket_ifname:
            draft.env[name] = draft.interface
            draft.decide(name, draft.interface, f"the interface of {draft.address}")


def _env_bug_workarounds(
    draft: _Draft,
    env: Mapping[str, str],
    settings: Settings,
    version: TorchVersion,
    facts: NodeFacts,
) -> None:
    """Bugs worked around by a variable torch itself reads (torch 2.5's shared store)."""
    for bug in bugs_for(version, facts.python_version):
        if bug.env is None:
            continue
        name, value = bug.env
        if env.get(name):
            continue
        if not settings.fix_torch_bugs:
            draft.warnings.append(f"{bug.left}; TORCHRUN_JSC_FIX_TORCH_BUGS=0 leaves {name} unset")
            continue
        draft.env[name] = value
        draft.decide(name, value, bug.fixes)


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


def _check_user_ifname(draft: _Draft, name: str, value: str, facts: NodeFacts) -> None:
    assert draft.interface is not None
    if ifname_selects(name, value, draft.interface):
        return
    known = sorted({i.name for i in facts.interfaces})
    message = (
        f"{name}={value} does not select {draft.interface}, the interface that reaches the "
        f"endpoint ({draft.address}); interfaces here: {', '.join(known)}; unset it or set "
        f"{name}={draft.interface}"
    )
    if name.startswith("GLOO"):
        draft.failures.append(message)
    else:
        draft.warnings.append(message)


def _finish(
    draft: _Draft, version: TorchVersion, strategy: Strategy, args: Optional[LaunchArgs]
) -> Plan:
    argv = list(draft.argv)
    if draft.args and args is not None:
        argv[args.script_index : args.script_index] = draft.args
    return Plan(
        torch_version=str(version),
        strategy=strategy.label,
        argv=tuple(argv),
        added_args=tuple(draft.args),
        env=tuple(sorted(draft.env.items())),
        patches=tuple(draft.patches),
        warnings=tuple(draft.warnings),
        decisions=tuple(draft.decisions),
        predicted_failures=tuple(draft.failures),
        is_host=draft.is_host,
        advertised_address=draft.address,
        interface=draft.interface,
    )
