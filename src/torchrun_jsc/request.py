"""The request: the command line and the environment, read and validated once.

:func:`read_request` is the only caller of torch's parser and the only place that validates
input. It returns a :class:`Request` holding everything the plan needs; the plan
(:func:`torchrun_jsc.plan.make_plan`) then needs no parser and reads no environment. Bad input
raises :class:`~torchrun_jsc.errors.ConfigError` with one line; input a launch does not use
(a broken ``SLURM_*`` variable under ``--standalone``) is never an error.
"""

from __future__ import annotations

import math
import signal
from datetime import timedelta
from typing import Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from . import autoconfig, envvars, handover
from .backend_name import NAME as OWN_BACKEND
from .backend_name import PLANNED_AS
from .errors import ConfigError
from .network import Endpoint, parse_endpoint
from .settings.table import Settings
from .slurm import SlurmStep
from .torch_cli import CommandLine, Parsed, Stop, TorchCli, option_source
from .torch_defaults import RDZV_SECONDS
from .versions import TORCH_BUGS

#: The variables that choose gloo's and NCCL's network interface.
SOCKET_IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
#: Variables of other tools the plan consults (it reads nothing else of the environment): the
#: interface variables and those torchrun_jsc sets against torch bugs unless the user did.
CONSULTED = (
    *SOCKET_IFNAME_VARIABLES,
    *(bug.env[0] for bug in TORCH_BUGS if bug.env is not None),
)
#: Keys the c10d rendezvous silently ignores, with the key to use instead.
IGNORED_RDZV_KEYS = {"timeout": "join_timeout (and read_timeout for the store)"}
TORCH_TRUE = frozenset({"1", "true", "t", "yes", "y"})
TORCH_FALSE = frozenset({"0", "false", "f", "no", "n"})


class LaunchOptions(NamedTuple):
    """The torchrun options the plan needs, as torchrun will see them (after Slurm
    auto-configuration)."""

    standalone: bool
    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_conf: str
    #: None when not given (or when this torch has no ``--local_addr``).
    local_addr: Optional[str]
    nnodes: str
    min_nodes: int
    max_nodes: int
    nproc_per_node: str
    rdzv_id: str
    max_restarts: int
    #: ``--node_rank`` when given explicitly.
    node_rank: Optional[int]
    #: ``--signals-to-handle`` (torch 2.10+), when this torch has it.
    signals_to_handle: Optional[str]
    #: Options (argparse ``dest`` names) given on the command line or by ``PET_*``.
    given: FrozenSet[str]
    #: ``--master_addr``: the static rendezvous's host when there is no ``--rdzv_endpoint``.
    master_addr: str = "127.0.0.1"
    #: Of those, the ones given only by a ``PET_*`` variable.
    from_env: FrozenSet[str] = frozenset()
    #: The training script (or module, or program) as given.
    training_script: str = ""
    #: The workers run ``python training_script`` (not ``-m``, ``--no-python`` or
    #: ``--run-path``, where it names a module, a program, or a path runpy reads).
    script_is_path: bool = False
    #: ``--log_dir`` (None: not given; torch makes a temporary one).
    log_dir: Optional[str] = None
    #: ``--numa-binding`` (torch 2.9+; None: not given): torch starts each worker under numactl.
    numa_binding: Optional[str] = None

    @property
    def multi_node(self) -> bool:
        """More than one node may join."""
        return not self.standalone and self.max_nodes > 1

    def source(self, dest: str) -> str:
        """What the user set for option ``dest``: ``--nproc_per_node`` or
        ``PET_NPROC_PER_NODE``."""
        return option_source(dest, self.from_env)


class Request(NamedTuple):
    """Everything the plan needs from the command line and the environment, validated."""

    argv: Tuple[str, ...]
    settings: Settings
    slurm: Optional[SlurmStep]
    #: torchrun stops by itself on this command line (``--help``, a usage error).
    stop: Optional[Stop] = None
    #: ``--version`` given among the launcher's own options.
    version_requested: bool = False
    #: None exactly when ``stop`` is set.
    options: Optional[LaunchOptions] = None
    #: Where added options go in ``argv`` (after the user's options, before the script).
    insert_at: int = 0
    auto: Optional[autoconfig.AutoArgs] = None
    #: Things noticed while reading that the plan reports as warnings.
    notes: Tuple[str, ...] = ()
    #: The rendezvous configuration (c10d), checked as torch would check it.
    rdzv_conf: Tuple[Tuple[str, str], ...] = ()
    endpoint: Optional[Endpoint] = None
    #: ``is_host`` as given in ``--rdzv_conf`` (None: not given), read as torch reads it.
    is_host: Optional[bool] = None
    #: Why torchrun_jsc leaves the rendezvous alone (None: it fixes it).
    untouched: Optional[str] = None
    node_rank: Optional[int] = None
    node_rank_source: Optional[str] = None
    #: The values of :data:`CONSULTED` variables that are set.
    environment: Tuple[Tuple[str, str], ...] = ()
    #: This process continues a job whose rendezvous host was lost (:mod:`.handover`).
    handover: Optional[handover.Handover] = None
    #: ``--rdzv_backend`` named torchrun_jsc's own backend (``jsc``), read as ``c10d``.
    own_backend: bool = False

    def env(self, name: str) -> str:
        """A consulted variable's value ('' when unset)."""
        assert name in CONSULTED, name
        return dict(self.environment).get(name, "")

    @property
    def conf(self) -> Dict[str, str]:
        """The rendezvous configuration as a dict."""
        return dict(self.rdzv_conf)

    def conf_seconds(self, key: str) -> int:
        """An integer rendezvous timeout, torch's default when not given."""
        return int(self.conf.get(key, RDZV_SECONDS[key]))

    @property
    def nproc_word(self) -> Optional[str]:
        """``--nproc_per_node`` when it is a word (``gpu``, ``auto``) that only this node's
        devices turn into a count."""
        if self.options is None or local_world_size(self.options.nproc_per_node) is not None:
            return None
        return self.options.nproc_per_node

    @property
    def script_path(self) -> Optional[str]:
        """The path python opens as the training script (None: it is a module, a program, a
        path ``--run-path`` reads, or ``-``, the standard input)."""
        if self.options is None or not self.options.script_is_path:
            return None
        script = self.options.training_script
        return script if script and script != "-" else None

    @property
    def lookup_host(self) -> Optional[str]:
        """The endpoint host whose addresses the plan needs (None: no look-up)."""
        if self.untouched is not None or self.endpoint is None:
            return None
        return self.endpoint.host


def read_request(
    argv: Sequence[str], env: Mapping[str, str], cli: Optional[TorchCli] = None
) -> Request:
    """Read and validate the request; raises :class:`ConfigError` for bad input."""
    settings = Settings.from_env(env)
    step = SlurmStep.from_env(env)
    command = CommandLine(env, cli)
    environment = tuple((k, env[k]) for k in CONSULTED if env.get(k, "").strip())
    base = Request(argv=tuple(argv), settings=settings, slurm=step, environment=environment)
    first = command.parse(argv)
    if isinstance(first, Stop):
        return base._replace(stop=first)
    notes: List[str] = []
    auto, filled = _auto_configure(first, settings, step, notes)
    handed, filled = _hand_over(filled, env)
    if handed is not None and handed.host_node_rank is not None:
        settings = settings._replace(host_node_rank=handed.host_node_rank)
    options = _options(command, filled)
    own_backend = options.rdzv_backend == OWN_BACKEND
    if own_backend:  # the backend's fixes are this command's own: planned for c10d
        options = options._replace(rdzv_backend=PLANNED_AS)
    if handed is not None and handed.quorum > options.min_nodes:
        low = min(handed.quorum, options.max_nodes)
        options = options._replace(min_nodes=low, nnodes=f"{low}:{options.max_nodes}")
    _check_signals_to_handle(options, settings)
    _check_torch_values(filled, options, settings)
    untouched = _untouched(options)
    conf: Dict[str, str] = {}
    endpoint: Optional[Endpoint] = None
    is_host: Optional[bool] = None
    if options.rdzv_backend == "c10d" and not options.standalone:
        conf = read_rdzv_conf(options.rdzv_conf)
        if "is_host" in conf:
            is_host = torch_bool("is_host", conf["is_host"])
        if options.rdzv_endpoint.strip():
            endpoint = parse_endpoint(options.rdzv_endpoint)
            _check_multi_node_endpoint(endpoint, options)
            if endpoint.note is not None:
                notes.append(endpoint.note)
    elif options.standalone:
        read_rdzv_conf(options.rdzv_conf)  # torch's own rendezvous for it reads the same
    if untouched is None and endpoint is not None and endpoint.is_loopback:
        untouched = f"endpoint {endpoint.host} is this machine's loopback"
    node_rank, source = _node_rank(settings, options, step, needed=untouched is None)
    if settings.rank_order == "node" and node_rank is None and untouched is None:
        raise ConfigError(
            "TORCHRUN_JSC_RANK_ORDER=node needs this node's rank; accepted: a node rank from"
            " TORCHRUN_JSC_NODE_RANK, --node_rank or SLURM_NODEID, or TORCHRUN_JSC_RANK_ORDER=torch"
        )
    if untouched is None and step is not None:
        step.need("tasks_per_node", "num_nodes")
    return base._replace(
        settings=settings,
        handover=handed,
        own_backend=own_backend,
        version_requested=first.version_requested,
        options=options,
        insert_at=first.insert_at,
        auto=auto,
        notes=tuple(notes),
        rdzv_conf=tuple(conf.items()),
        endpoint=endpoint,
        is_host=is_host,
        untouched=untouched,
        node_rank=node_rank,
        node_rank_source=source,
    )


def _auto_configure(
    parsed: Parsed,
    settings: Settings,
    step: Optional[SlurmStep],
    notes: List[str],
) -> Tuple[Optional[autoconfig.AutoArgs], Parsed]:
    """Slurm auto-configuration: the arguments it adds and the command line with them.

    The command line is not parsed again: every added option is a string option that torch's
    parser stores as given, inserted where ``parsed.insert_at`` was proven to take options, so
    its values are the parsed ones with the added values over them."""
    if not settings.slurm_auto:
        return None, parsed
    if step is None or not step.in_step:
        notes.append("TORCHRUN_JSC_SLURM_AUTO=1 outside a Slurm step (srun): nothing filled in")
        return None, parsed
    backend = str(parsed.values.get("rdzv_backend") or "")
    auto = autoconfig.slurm_args(step, parsed.given, backend, settings.host_suffix)
    if not auto.args:
        return auto, parsed
    added = dict(auto.values)
    return auto, parsed._replace(
        values={**parsed.values, **added}, given=parsed.given | frozenset(added)
    )


def _hand_over(
    parsed: Parsed, env: Mapping[str, str]
) -> Tuple[Optional[handover.Handover], Parsed]:
    """A process started again after a lost rendezvous host: the next host's endpoint over the
    command line's (the plan adds it as an option after the user's, so it wins)."""
    text = env.get(handover.VARIABLE, "")
    if not text.strip():
        return None, parsed
    handed = handover.decode(text)
    return handed, parsed._replace(
        values={**parsed.values, "rdzv_endpoint": handed.endpoint},
        given=parsed.given | frozenset({"rdzv_endpoint"}),
    )


#: What ``--nnodes`` accepts (torch's ``parse_min_max_nnodes``, and a launch that can start).
NNODES_ACCEPTS = "N or MIN:MAX, integers with 0 < MIN <= MAX"
#: What ``--nproc_per_node`` accepts (torch's ``determine_local_world_size``, and a worker).
NPROC_ACCEPTS = "an integer >= 1, or cpu, gpu, auto (or another device this torch knows)"


def _options(command: CommandLine, parsed: Parsed) -> LaunchOptions:
    values = parsed.values
    nnodes = str(values.get("nnodes", "1:1"))
    try:
        low, high = command.cli.nnodes(nnodes)
    except (ValueError, RuntimeError):
        # torch's words repeat the value whole and name no range: the accepted values say it
        raise envvars.invalid(parsed.source("nnodes"), nnodes, NNODES_ACCEPTS) from None
    if not 0 < low <= high:
        raise envvars.invalid(parsed.source("nnodes"), nnodes, NNODES_ACCEPTS)
    nproc = str(values.get("nproc_per_node", "1"))
    workers = local_world_size(nproc)
    if workers is not None and workers < 1:
        raise envvars.invalid(parsed.source("nproc_per_node"), nproc, NPROC_ACCEPTS)
    restarts = values.get("max_restarts", 0)
    if not isinstance(restarts, int) or restarts < 0:
        raise envvars.invalid(parsed.source("max_restarts"), str(restarts), "an integer >= 0")
    node_rank = values.get("node_rank") if "node_rank" in parsed.given else None
    return LaunchOptions(
        standalone=bool(values.get("standalone", False)),
        rdzv_backend=str(values.get("rdzv_backend", "static") or ""),
        rdzv_endpoint=str(values.get("rdzv_endpoint", "") or ""),
        rdzv_conf=str(values.get("rdzv_conf", "") or ""),
        local_addr=values.get("local_addr") or None,
        nnodes=nnodes,
        min_nodes=low,
        max_nodes=high,
        nproc_per_node=nproc,
        rdzv_id=str(values.get("rdzv_id", "none")),
        max_restarts=restarts,
        node_rank=node_rank if isinstance(node_rank, int) and node_rank >= 0 else None,
        signals_to_handle=values.get("signals_to_handle"),
        given=parsed.given,
        master_addr=str(values.get("master_addr") or "127.0.0.1"),
        from_env=parsed.from_env,
        training_script=str(values.get("training_script") or ""),
        script_is_path=not any(values.get(k) for k in ("no_python", "module", "run_path")),
        log_dir=str(values.get("log_dir") or "") or None,
        numa_binding=str(values.get("numa_binding") or "") or None,
    )


#: The rendezvous backends torch registers itself (a plugin may add others, under any name).
TORCH_BACKENDS = ("c10d", "static", "etcd", "etcd-v2")
#: The longest ``--monitor-interval`` accepted: torch sleeps that long between looks
#: (``time.sleep`` refuses values from about 9.2e9 s, with ``OverflowError``).
MAX_MONITOR_INTERVAL = 1e9


def _check_torch_values(parsed: Parsed, options: LaunchOptions, settings: Settings) -> None:
    """Values torch's parser lets through and torch then stops on with a traceback, and a
    ``--shutdown-timeout`` that ``TORCHRUN_JSC_TERM_GRACE`` would silently override."""
    values = parsed.values
    interval = values.get("monitor_interval")
    if isinstance(interval, float) and not (
        math.isfinite(interval) and 0 < interval <= MAX_MONITOR_INTERVAL
    ):
        raise envvars.invalid(
            parsed.source("monitor_interval"),
            str(interval),
            f"seconds > 0, finite, at most {MAX_MONITOR_INTERVAL:g}",
            "torch's agent stops on it",
        )
    backend = options.rdzv_backend
    if not options.standalone and backend not in TORCH_BACKENDS:
        near = backend.strip().lower()
        if not near or near in TORCH_BACKENDS:
            reason = "no backend has an empty name" if not near else f"torch knows {near}, in"
            raise envvars.invalid(
                parsed.source("rdzv_backend"),
                backend,
                ", ".join(TORCH_BACKENDS) + " (or a backend a torch plugin registers)",
                reason if not near else reason + " lower case",
            )
    shutdown = values.get("shutdown_timeout")
    if not isinstance(shutdown, int) or "shutdown_timeout" not in parsed.given:
        return
    source = parsed.source("shutdown_timeout")
    if shutdown < 0:
        raise envvars.invalid(
            source, str(shutdown), "whole seconds >= 0", "torch stops on a negative one"
        )
    grace = settings.term_grace
    if grace is not None and grace != shutdown:
        raise ConfigError(
            f"TORCHRUN_JSC_TERM_GRACE={grace:g} and {source}={shutdown} disagree: both set the"
            " grace between SIGTERM and SIGKILL, and TORCHRUN_JSC_TERM_GRACE would win; accepted:"
            " one of them, or the same value in both"
        )


#: Signals no process can handle: ``signal.signal`` refuses them with ``OSError``, which stops
#: torch's agent as it starts the workers.
UNCATCHABLE = ("SIGKILL", "SIGSTOP")
#: What ``--signals-to-handle`` (torch 2.10+) accepts.
SIGNALS_ACCEPTS = (
    "comma-separated signal names as Python's signal module spells them (upper case, with SIG:"
    " SIGTERM,SIGUSR1), not SIGKILL or SIGSTOP"
)


def handled_signals(text: Optional[str]) -> Tuple[str, ...]:
    """``--signals-to-handle`` as torch reads it: split at commas, each name stripped and looked
    up in the ``signal`` module as it is (``sigusr1`` is no signal to torch)."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


def _check_signals_to_handle(options: LaunchOptions, settings: Settings) -> None:
    """Names torch cannot register (it logs a warning and leaves the signal unhandled) or that
    no process can handle (torch's agent stops with ``OSError``), and the requeue's warning
    signal taken over by torch (it would stop the workers on it and nobody would requeue)."""
    text = options.signals_to_handle
    if text is None or not text.strip():
        return
    source = options.source("signals_to_handle")
    for item in text.split(","):
        name = item.strip()
        if name in UNCATCHABLE:
            reason = f"{name} cannot be handled (torch's agent would stop with OSError)"
        elif name not in signal.Signals.__members__:
            meant = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
            hint = f" (names are as Python spells them: {meant})" if meant in _CATCHABLE else ""
            what = "an empty name" if not name else envvars.shown(name)
            reason = f"torch cannot register {what}, so that signal would not be handled{hint}"
        else:
            continue
        raise envvars.invalid(source, text, SIGNALS_ACCEPTS, reason)
    wanted = settings.requeue_signal
    if settings.requeue and wanted in handled_signals(text):
        raise ConfigError(
            f"TORCHRUN_JSC_REQUEUE=1 with {source}={envvars.shown(text)}: torch would handle"
            f" {wanted} itself and stop the workers on it, so the job would never be requeued;"
            f" accepted: a {source} without {wanted} (torch's default is"
            " SIGTERM,SIGINT,SIGHUP,SIGQUIT), or TORCHRUN_JSC_REQUEUE_SIGNAL naming the other"
            " warning signal"
        )


_CATCHABLE = frozenset(signal.Signals.__members__) - frozenset(UNCATCHABLE)


def local_world_size(text: str) -> Optional[int]:
    """``--nproc_per_node`` read as an integer the way torch reads it first (``int(text)``:
    blanks around it, a sign, ``_`` between digits); None for a word such as ``gpu``."""
    try:
        return int(text)
    except ValueError:
        return None


def _untouched(options: LaunchOptions) -> Optional[str]:
    """Why the rendezvous is left as torch does it, or None when torchrun_jsc fixes it."""
    if options.standalone:
        return "--standalone runs on this node only"
    if options.rdzv_backend != "c10d":
        return f"backend {options.rdzv_backend!r} is not c10d"
    if not options.rdzv_endpoint.strip():
        return "no --rdzv_endpoint: torch uses localhost"
    return None


def _check_multi_node_endpoint(endpoint: Endpoint, options: LaunchOptions) -> None:
    if not options.multi_node or endpoint.is_loopback:
        return
    accepted = "the name or address of the node that hosts the rendezvous, with a port"
    given = f"--rdzv_endpoint {envvars.shown(endpoint.text)}"
    if endpoint.is_wildcard:
        raise ConfigError(
            f"{given}: a wildcard address names no node, so every node would host and advertise"
            f" it; accepted: {accepted}"
        )
    if endpoint.port == 0:
        raise ConfigError(
            f"{given}: port 0 lets the host pick a port nobody else knows; accepted: {accepted}"
            " in 1..65535"
        )


def _node_rank(
    settings: Settings, options: LaunchOptions, step: Optional[SlurmStep], needed: bool
) -> Tuple[Optional[int], Optional[str]]:
    if settings.node_rank is not None:
        return settings.node_rank, "TORCHRUN_JSC_NODE_RANK"
    if options.node_rank is not None:
        return options.node_rank, "--node_rank"
    if step is None:
        return None, None
    if needed:
        step.need("node_id")
    if step.node_id is not None:
        return step.node_id, "SLURM_NODEID"
    return None, None


def read_rdzv_conf(text: str) -> Dict[str, str]:
    """``k1=v1,k2=v2`` as torch reads it (last duplicate wins), with the values torch reads as
    integers checked (``is_host``, a boolean, is read by :func:`read_request`); raises
    :class:`ConfigError`."""
    conf: Dict[str, str] = {}
    if not text.strip():
        return conf
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not key or not sep or not value:
            raise ConfigError(
                f"--rdzv_conf {envvars.shown(text)}: {envvars.shown(item.strip())} is not"
                " KEY=VALUE; "
                "accepted: KEY=VALUE pairs separated by commas, no empty key or value"
            )
        conf[key] = value
    for key in RDZV_TIMEOUT_KEYS:
        if key in conf:
            rdzv_seconds(key, conf[key])
    return conf


#: The rendezvous timeouts torch reads with ``int()`` and refuses below 1 s (``ValueError: The
#: join timeout (0:00:00) must be positive``), after the agents started.
RDZV_TIMEOUT_KEYS = (*RDZV_SECONDS, "heartbeat_timeout")
#: The longest such timeout torch can make a ``timedelta`` of (beyond it: ``OverflowError``).
MAX_RDZV_SECONDS = timedelta.max.days * 86_400 + timedelta.max.seconds
RDZV_SECONDS_ACCEPTS = (
    f"whole seconds in 1..{MAX_RDZV_SECONDS} as torch reads them with int() (+5 and 1_0 too)"
)


def rdzv_seconds(key: str, text: str) -> int:
    """A rendezvous timeout as torch reads it (``int(text)``), refused where torch would stop
    on it; raises :class:`ConfigError`."""
    try:
        seconds = int(text)
    except ValueError:
        reason = ""
    else:
        if 1 <= seconds <= MAX_RDZV_SECONDS:
            return seconds
        reason = "torch stops on a timeout below 1 s" if seconds < 1 else "too long for torch"
    why = f": {reason}" if reason else ""
    raise ConfigError(
        f"--rdzv_conf {key}={envvars.shown(text)} is not valid{why}; accepted:"
        f" {RDZV_SECONDS_ACCEPTS}"
    )


def format_rdzv_conf(conf: Mapping[str, str]) -> str:
    """The inverse of :func:`read_rdzv_conf`."""
    return ",".join(f"{k}={v}" for k, v in conf.items())


def torch_bool(key: str, value: str) -> bool:
    """A rendezvous boolean as torch's ``get_as_bool`` reads it, or ConfigError."""
    low = value.strip().lower()
    if low in TORCH_TRUE:
        return True
    if low in TORCH_FALSE:
        return False
    raise ConfigError(
        f"--rdzv_conf {key}={envvars.shown(value)} is not valid; accepted: 1/0, true/false, t/f,"
        " yes/no, y/n"
    )
