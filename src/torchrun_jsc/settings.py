"""The ``TORCHRUN_JSC_*`` environment variables: their table, parsing and validation.

:func:`Settings.from_env` reads a mapping (never ``os.environ`` implicitly) and raises
:class:`~torchrun_jsc.errors.ConfigError` with a one-line message for any bad value. An empty
value counts as unset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Tuple, TypeVar

from .errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Variable:
    """One documented environment variable."""

    name: str
    default: str
    accepted: str
    meaning: str


VARIABLES: Tuple[Variable, ...] = (
    Variable(
        "TORCHRUN_JSC_PREFER_ARG_PATCHING",
        "1",
        "0 or 1",
        "1: decide is_host and pass it in --rdzv_conf; 0: patch torch's host recognition"
        " (_matches_machine_hostname) to match the endpoint against this machine's addresses"
        " (node ranks are then not used).",
    ),
    Variable(
        "TORCHRUN_JSC_PREFER_OLD_SOLUTION",
        "0",
        "0 or 1",
        "1: where torch honours --local_addr, advertise this node's address by a runtime patch"
        " instead (the original tool's 'old solution').",
    ),
    Variable(
        "TORCHRUN_JSC_NODE_RANK",
        "$SLURM_NODEID",
        "an integer >= 0",
        "This node's rank, used to decide is_host. Unset and no SLURM_NODEID: is_host is decided"
        " by matching the endpoint with this machine's addresses.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_NODE_RANK",
        "0",
        "an integer >= 0",
        "The node rank of the rendezvous host (the node the endpoint names).",
    ),
    Variable(
        "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS",
        "1",
        "0 or 1",
        "1: every node advertises its own address on the network that reaches the endpoint"
        " (found by a route lookup), so MASTER_ADDR is reachable whichever node is group rank 0.",
    ),
    Variable(
        "TORCHRUN_JSC_SET_SOCKET_IFNAME",
        "1",
        "0 or 1",
        "1: set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, when unset, to the interface that"
        " carries the advertised address.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_BY_ADDRESS",
        "1",
        "0 or 1",
        "1: without a node rank, decide is_host by matching the endpoint's resolved addresses"
        " with this machine's addresses (IPv4 and IPv6).",
    ),
    Variable(
        "TORCHRUN_JSC_FIX_TORCH_BUGS",
        "1",
        "0 or 1",
        "1: work around torch bugs that break plain torchrun (torch < 2.0 on Python >= 3.11:"
        " the default --redirects/--tee values; torch 2.3: worker restarts close the rendezvous;"
        " torch 2.5: worker restarts with the shared rendezvous store).",
    ),
    Variable(
        "TORCHRUN_JSC_RESOLVE_TIMEOUT",
        "5",
        "a number of seconds >= 0",
        "How long to retry resolving the rendezvous endpoint before giving up.",
    ),
    Variable(
        "TORCHRUN_JSC_EXPLAIN",
        "",
        "empty, 'text' or 'json'",
        "Print what torchrun_jsc would do on this node and exit without launching.",
    ),
    Variable(
        "TORCHRUN_JSC_SLURM_AUTO",
        "0",
        "0 or 1",
        "1: inside a Slurm step, fill in what the command line leaves out: --nnodes, "
        "--rdzv_backend=c10d, --rdzv_endpoint (first node + host suffix, port from the job id), "
        "--rdzv_id, --nproc_per_node (SLURM_GPUS_ON_NODE). Given options always win.",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_SUFFIX",
        "'i' on JUWELS, JUWELS Booster, JURECA(-DC), JUSUF; else none",
        "letters, digits, '.', '-', or 'none'",
        "Appended to the first node's name to form the auto-configured endpoint.",
    ),
    Variable(
        "TORCHRUN_JSC_GUARDS",
        "stop",
        "'stop' or 'warn'",
        "What a guard does on a launch that cannot work (several agents per node, a multi-node"
        " launch outside srun): stop with the fix, or only warn.",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT",
        "0",
        "0 or 1",
        "1: instead of launching, check across the job (run under srun on every node) that"
        " exactly one node hosts and every node reaches the endpoint and every other node;"
        " print a per-node table and one verdict.",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT_TIMEOUT",
        "20",
        "a number of seconds > 0",
        "How long the preflight waits for every node.",
    ),
)

_BY_NAME: Dict[str, Variable] = {v.name: v for v in VARIABLES}


def _accepted(name: str) -> str:
    return _BY_NAME[name].accepted if name in _BY_NAME else "an integer >= 0"


def _get(env: Mapping[str, str], name: str) -> Optional[str]:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _bad(name: str, value: str) -> ConfigError:
    return ConfigError(f"{name}={value!r} is not valid; accepted: {_accepted(name)}")


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = _get(env, name)
    if value is None:
        return _BY_NAME[name].default == "1"
    if value not in ("0", "1"):
        raise _bad(name, value)
    return value == "1"


def _parsed(env: Mapping[str, str], name: str, parse: Callable[[str], T]) -> Optional[T]:
    value = _get(env, name)
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError:
        raise _bad(name, value) from None


def _rank(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise ValueError(text)
    return value


def _suffix(text: str) -> str:
    if text == "none":
        return ""
    if not all((c.isascii() and c.isalnum()) or c in ".-" for c in text):
        raise ValueError(text)
    return text


def _guards(text: str) -> str:
    if text not in ("stop", "warn"):
        raise ValueError(text)
    return text


def _explain(text: str) -> str:
    if text not in ("text", "json"):
        raise ValueError(text)
    return text


@dataclass(frozen=True)
class Settings:
    """Validated torchrun_jsc settings (see :data:`VARIABLES` for their meaning)."""

    prefer_arg_patching: bool = True
    prefer_old_solution: bool = False
    node_rank: Optional[int] = None
    node_rank_source: Optional[str] = None
    host_node_rank: int = 0
    advertise_own_address: bool = True
    set_socket_ifname: bool = True
    host_by_address: bool = True
    fix_torch_bugs: bool = True
    resolve_timeout: float = 5.0
    explain: Optional[str] = None
    preflight: bool = False
    preflight_timeout: float = 20.0
    slurm_auto: bool = False
    host_suffix: Optional[str] = None
    guards: str = "stop"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read and validate every ``TORCHRUN_JSC_*`` variable (and ``SLURM_NODEID``)."""
        unknown = sorted(k for k in env if k.startswith("TORCHRUN_JSC_") and k not in _BY_NAME)
        if unknown:
            known = ", ".join(v.name for v in VARIABLES)
            raise ConfigError(f"unknown variable {unknown[0]}; known: {known}")
        node_rank = _parsed(env, "TORCHRUN_JSC_NODE_RANK", _rank)
        source: Optional[str] = "TORCHRUN_JSC_NODE_RANK" if node_rank is not None else None
        if node_rank is None:
            node_rank = _parsed(env, "SLURM_NODEID", _rank)
            source = "SLURM_NODEID" if node_rank is not None else None
        host_rank = _parsed(env, "TORCHRUN_JSC_HOST_NODE_RANK", _rank)
        timeout = _parsed(env, "TORCHRUN_JSC_RESOLVE_TIMEOUT", _seconds)
        preflight_timeout = _parsed(env, "TORCHRUN_JSC_PREFLIGHT_TIMEOUT", _positive_seconds)
        return cls(
            prefer_arg_patching=_flag(env, "TORCHRUN_JSC_PREFER_ARG_PATCHING"),
            prefer_old_solution=_flag(env, "TORCHRUN_JSC_PREFER_OLD_SOLUTION"),
            node_rank=node_rank,
            node_rank_source=source,
            host_node_rank=0 if host_rank is None else host_rank,
            advertise_own_address=_flag(env, "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS"),
            set_socket_ifname=_flag(env, "TORCHRUN_JSC_SET_SOCKET_IFNAME"),
            host_by_address=_flag(env, "TORCHRUN_JSC_HOST_BY_ADDRESS"),
            fix_torch_bugs=_flag(env, "TORCHRUN_JSC_FIX_TORCH_BUGS"),
            resolve_timeout=5.0 if timeout is None else timeout,
            explain=_parsed(env, "TORCHRUN_JSC_EXPLAIN", _explain),
            preflight=_flag(env, "TORCHRUN_JSC_PREFLIGHT"),
            preflight_timeout=20.0 if preflight_timeout is None else preflight_timeout,
            slurm_auto=_flag(env, "TORCHRUN_JSC_SLURM_AUTO"),
            host_suffix=_parsed(env, "TORCHRUN_JSC_HOST_SUFFIX", _suffix),
            guards=_parsed(env, "TORCHRUN_JSC_GUARDS", _guards) or "stop",
        )
