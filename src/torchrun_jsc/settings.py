"""The ``TORCHRUN_JSC_*`` environment variables: one table, the one home of each default.

:func:`Settings.from_env` reads a mapping (never ``os.environ`` implicitly) and raises
:class:`~torchrun_jsc.errors.ConfigError` with a one-line message for any bad value or unknown
``TORCHRUN_JSC_*`` name. A blank value counts as unset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from . import envvars
from .errors import ConfigError

#: Largest node rank accepted anywhere (far above any machine's node count).
MAX_NODE_RANK = 1_000_000
#: Longest wait any setting may ask for, in seconds (one day).
MAX_SECONDS = 86_400.0

_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})
SWITCH = "0 or 1 (as the original torchrun_jsc: any integer, 0 is off), true/false, yes/no, on/off"


def switch(text: str) -> bool:
    """A switch as the original torchrun_jsc read it (``bool(int(value))``), plus words."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return bool(int(low))


def rank(text: str) -> int:
    """An integer in 0..MAX_NODE_RANK (ASCII digits)."""
    if not text.isascii() or not text.isdigit() or int(text) > MAX_NODE_RANK:
        raise ValueError(text)
    return int(text)


def seconds(text: str, low: float = 0.0, open_low: bool = False) -> float:
    """A finite number of seconds in [low, MAX_SECONDS] (or (low, ...] with ``open_low``)."""
    if not text.isascii():
        raise ValueError(text)
    number = float(text)
    if not math.isfinite(number) or number > MAX_SECONDS or number < low:
        raise ValueError(text)
    if open_low and number == low:
        raise ValueError(text)
    return number


def _positive_seconds(text: str) -> float:
    return seconds(text, open_low=True)


def _suffix(text: str) -> str:
    if text == "none":
        return ""
    ok = all((c.isascii() and c.isalnum()) or c in ".-" for c in text)
    if not ok or len(text) > 63 or ".." in text:
        raise ValueError(text)
    return text


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(text)
        return text

    return parse


@dataclass(frozen=True)
class Variable:
    """One documented environment variable; ``default`` is the value used when it is unset."""

    name: str
    field: str
    parse: Callable[[str], Any]
    default: Any
    shown_default: str
    accepted: str
    meaning: str


VARIABLES: Tuple[Variable, ...] = (
    Variable(
        "TORCHRUN_JSC_PREFER_ARG_PATCHING",
        "prefer_arg_patching",
        switch,
        True,
        "1",
        SWITCH,
        "1: decide is_host and pass it in --rdzv_conf; 0: patch torch's host recognition"
        " (_matches_machine_hostname) to match the endpoint against this machine's addresses"
        " (node ranks are then not used for it).",
    ),
    Variable(
        "TORCHRUN_JSC_PREFER_OLD_SOLUTION",
        "prefer_old_solution",
        switch,
        False,
        "0",
        SWITCH,
        "1: where torch honours --local_addr, advertise this node's address by a runtime patch"
        " instead (the original tool's 'old solution').",
    ),
    Variable(
        "TORCHRUN_JSC_NODE_RANK",
        "node_rank",
        rank,
        None,
        "--node_rank, else $SLURM_NODEID",
        f"an integer in 0..{MAX_NODE_RANK}",
        "This node's rank: decides is_host and the rank order. Unset, with no --node_rank and"
        " no SLURM_NODEID: is_host is decided by matching the endpoint with this machine's"
        " addresses.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_NODE_RANK",
        "host_node_rank",
        rank,
        0,
        "0",
        f"an integer in 0..{MAX_NODE_RANK}",
        "The node rank of the rendezvous host (the node the endpoint names).",
    ),
    Variable(
        "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS",
        "advertise_own_address",
        switch,
        True,
        "1",
        SWITCH,
        "1: every node advertises its own address on the network that reaches the endpoint"
        " (found by a route lookup), so MASTER_ADDR is reachable whichever node is group rank 0.",
    ),
    Variable(
        "TORCHRUN_JSC_SET_SOCKET_IFNAME",
        "set_socket_ifname",
        switch,
        True,
        "1",
        SWITCH,
        "1: set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, when unset, to the interface that"
        " carries the advertised address.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_BY_ADDRESS",
        "host_by_address",
        switch,
        True,
        "1",
        SWITCH,
        "1: without a node rank, decide is_host by matching the endpoint's resolved addresses"
        " with this machine's addresses (IPv4 and IPv6).",
    ),
    Variable(
        "TORCHRUN_JSC_FIX_TORCH_BUGS",
        "fix_torch_bugs",
        switch,
        True,
        "1",
        SWITCH,
        "1: work around torch bugs that break plain torchrun (torch < 2.0 on Python >= 3.11:"
        " the default --redirects/--tee; torch 2.3: worker restarts close the rendezvous;"
        " torch 2.5: worker restarts with the shared rendezvous store).",
    ),
    Variable(
        "TORCHRUN_JSC_RESOLVE_TIMEOUT",
        "resolve_timeout",
        seconds,
        5.0,
        "5",
        f"seconds in 0..{MAX_SECONDS:g}",
        "How long to retry resolving the rendezvous endpoint before giving up.",
    ),
    Variable(
        "TORCHRUN_JSC_EXPLAIN",
        "explain",
        _choice("text", "json"),
        None,
        "empty",
        "empty, 'text' or 'json'",
        "Print what torchrun_jsc would do on this node and exit without launching.",
    ),
    Variable(
        "TORCHRUN_JSC_SLURM_AUTO",
        "slurm_auto",
        switch,
        False,
        "0",
        SWITCH,
        "1: inside a Slurm step, fill in what the command line leaves out: --nnodes, "
        "--rdzv_backend=c10d, --rdzv_endpoint (first node + host suffix, port from the job id), "
        "--rdzv_id, --nproc_per_node (SLURM_GPUS_ON_NODE). Given options always win.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_SUFFIX",
        "host_suffix",
        _suffix,
        None,
        "'i' on JUWELS, JUWELS Booster, JURECA(-DC), JUSUF; else none",
        "letters, digits, '.', '-' (at most 63, no '..'), or 'none'",
        "Appended to the first node's name to form the auto-configured endpoint.",
    ),
    Variable(
        "TORCHRUN_JSC_GUARDS",
        "guards",
        _choice("stop", "warn"),
        "stop",
        "stop",
        "'stop' or 'warn'",
        "What a guard does on a launch that cannot work (several agents per node, a multi-node"
        " launch outside srun): stop with the fix, or only warn.",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT",
        "preflight",
        switch,
        False,
        "0",
        SWITCH,
        "1: instead of launching, check across the job (run under srun on every node) that"
        " exactly one node hosts and every node reaches the endpoint and its peers;"
        " print a per-node table and one verdict.",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT_TIMEOUT",
        "preflight_timeout",
        _positive_seconds,
        20.0,
        "20",
        f"seconds in (0, {MAX_SECONDS:g}]",
        "How long the preflight waits for every node.",
    ),
)

_BY_NAME: Dict[str, Variable] = {v.name: v for v in VARIABLES}


def variable(name: str) -> Variable:
    """The table row of ``name``."""
    return _BY_NAME[name]


@dataclass(frozen=True)
class Settings:
    """Validated torchrun_jsc settings; see :data:`VARIABLES` for meaning and defaults."""

    prefer_arg_patching: bool
    prefer_old_solution: bool
    node_rank: Optional[int]
    host_node_rank: int
    advertise_own_address: bool
    set_socket_ifname: bool
    host_by_address: bool
    fix_torch_bugs: bool
    resolve_timeout: float
    explain: Optional[str]
    slurm_auto: bool
    host_suffix: Optional[str]
    guards: str
    preflight: bool
    preflight_timeout: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read and validate every ``TORCHRUN_JSC_*`` variable."""
        unknown = sorted(k for k in env if k.startswith("TORCHRUN_JSC_") and k not in _BY_NAME)
        if unknown:
            known = ", ".join(v.name for v in VARIABLES)
            raise ConfigError(f"unknown variable {unknown[0]}; known: {known}")
        values: Dict[str, Any] = {}
        for var in VARIABLES:
            found = envvars.parsed(env, var.name, var.parse, var.accepted)
            values[var.field] = var.default if found is None else found
        settings = cls(**values)
        if settings.explain and settings.preflight:
            raise ConfigError(
                "TORCHRUN_JSC_EXPLAIN and TORCHRUN_JSC_PREFLIGHT are both set; accepted: one of"
                " them (explain shows this node's plan, the preflight checks the whole job)"
            )
        return settings

    @classmethod
    def defaults(cls) -> Settings:
        """Every setting at its default."""
        return cls.from_env({})
