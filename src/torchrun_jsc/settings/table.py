"""The ``TORCHRUN_JSC_*`` environment variables: one table, the one home of each default.

:func:`Settings.from_env` reads a mapping (never ``os.environ`` implicitly) and raises
:class:`~torchrun_jsc.errors.ConfigError` with a one-line message for any bad value or unknown
``TORCHRUN_JSC_*`` name. A blank value counts as unset. The parsers of the values and their
bounds live in :mod:`torchrun_jsc.settings.values`.
"""

from __future__ import annotations

import signal
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from .. import envvars
from ..errors import ConfigError
from ..handover import VARIABLE as HANDOVER_VARIABLE
from ..patches.backoff import FIRST as BACKOFF_FIRST
from ..patches.wait_for_host import SAY_EVERY
from ..torch_defaults import JOIN_TIMEOUT, KEEP_ALIVE_INTERVAL, READ_TIMEOUT, TERM_GRACE
from .requeue import REQUEUE_VARIABLES
from .values import (
    FORWARDABLE,
    MAX_NODE_RANK,
    MAX_SECONDS,
    MIN_PEER_TIMEOUT,
    SWITCH,
    Variable,
    choice,
    events_target,
    explain_format,
    peer_seconds,
    positive_seconds,
    rank,
    seconds,
    signal_names,
    suffix,
    switch,
)

VARIABLES: Tuple[Variable, ...] = (
    Variable(
        "TORCHRUN_JSC_PREFER_ARG_PATCHING",
        "prefer_arg_patching",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: decide `is_host` and pass it in `--rdzv_conf`. 0: patch torch's host recognition "
            "(`_matches_machine_hostname`, in both modules that bind it) to match the endpoint "
            "against this machine's addresses; node ranks are then not used."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_PREFER_OLD_SOLUTION",
        "prefer_old_solution",
        switch,
        False,
        "0",
        SWITCH,
        (
            "1: where torch honours `--local_addr`, advertise this node's address by a "
            "runtime patch "
            "instead."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_NODE_RANK",
        "node_rank",
        rank,
        None,
        "--node_rank, else $SLURM_NODEID",
        f"an integer in 0..{MAX_NODE_RANK}",
        "This node's rank for the `is_host` decision.",
        short="integer 0..1000000",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_NODE_RANK",
        "host_node_rank",
        rank,
        0,
        "0",
        f"an integer in 0..{MAX_NODE_RANK}",
        "Node rank of the rendezvous host (the node the endpoint names).",
        short="integer 0..1000000",
    ),
    Variable(
        "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS",
        "advertise_own_address",
        switch,
        True,
        "1",
        SWITCH,
        "Fix 2 above; 0 leaves torch's advertised address alone.",
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_SET_SOCKET_IFNAME",
        "set_socket_ifname",
        switch,
        True,
        "1",
        SWITCH,
        "Fix 3 above; 0 leaves `GLOO_SOCKET_IFNAME`/`NCCL_SOCKET_IFNAME` alone.",
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_BY_ADDRESS",
        "host_by_address",
        switch,
        True,
        "1",
        SWITCH,
        "Without a node rank, decide `is_host` by address; 0 leaves it to torch's guess.",
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_FIX_TORCH_BUGS",
        "fix_torch_bugs",
        switch,
        True,
        "1",
        SWITCH,
        (
            "Work around torch bugs that break plain torchrun: torch < 2.0 on Python ≥ 3.11 "
            "crashes "
            "on the default `--redirects`/`--tee`; torch 2.3 closes the rendezvous when it "
            "restarts "
            "workers (`--max_restarts`), so its agents get a patch that keeps it open; torch 2.5 "
            "cannot restart workers (`--max_restarts`) with its shared rendezvous store, so "
            "multi-node launches get `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_RESOLVE_TIMEOUT",
        "resolve_timeout",
        seconds,
        5.0,
        "5",
        f"seconds in 0..{MAX_SECONDS:g}",
        "How long to retry resolving the endpoint before stopping with an error.",
        short="seconds 0..86400",
    ),
    Variable(
        "TORCHRUN_JSC_EXPLAIN",
        "explain",
        explain_format,
        None,
        "empty",
        "empty, 'text' (or 1) or 'json'",
        (
            "Print what would be done on this node and exit without launching (`1` is `text`); "
            "exit code 1 when the plan predicts a failure, 2 when torchrun or a guard rejects the "
            "command line (reported in the same format). Not together with "
            "`TORCHRUN_JSC_PREFLIGHT`."
        ),
        short="`text` (or `1`), `json`",
    ),
    Variable(
        "TORCHRUN_JSC_SLURM_AUTO",
        "slurm_auto",
        switch,
        False,
        "0",
        SWITCH,
        (
            "1: inside a Slurm step, fill in what the command line leaves out: `--nnodes` "
            "(the step's"
            " node count), `--rdzv_backend=c10d`, `--rdzv_endpoint` (first node of the step + host "
            "suffix, port 20000..31999 from the job id), `--rdzv_id` (`slurm-<job>-<step>`), "
            "`--nproc_per_node` (`SLURM_GPUS_ON_NODE`). What you give always wins."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_HOST_SUFFIX",
        "host_suffix",
        suffix,
        None,
        "'i' on JUWELS, JUWELS Booster, JURECA(-DC), JUSUF; else none",
        "letters, digits, '.', '-' (at most 63, no '..'), or 'none' (any case) for no suffix",
        "Appended to the first node's name for the auto-configured endpoint; `none` (in any"
        " case: `None`, `NONE`) appends nothing.",
        short="letters, digits, `.`, `-` (at most 63, no `..`), or `none`",
    ),
    Variable(
        "TORCHRUN_JSC_GUARDS",
        "guards",
        choice("stop", "warn"),
        "stop",
        "stop",
        "'stop' or 'warn'",
        (
            "A launch that cannot work (several Slurm tasks per node each starting an agent; a "
            "multi-node launch started outside `srun`; `--standalone` with `--nnodes=2`; "
            "`--nnodes=2` with a `localhost` rendezvous in a multi-node step; a "
            "`TORCHRUN_JSC_HOST_NODE_RANK` no node has; a training script or `--log_dir` this "
            "node cannot use; `--numa-binding` without numactl) stops with the fix "
            "in the message, or only warns."
        ),
        short="`stop`, `warn`",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT",
        "preflight",
        switch,
        False,
        "0",
        SWITCH,
        (
            "1: check the whole job instead of launching (run under `srun` on every node): exactly "
            "one host, every node reaches the endpoint, and every node's advertised address is "
            "reached by the few nodes that probe it (ring neighbours and a fixed spread, 1..6 per "
            "node whatever the job's size; docs/how-it-works.md); a per-node table and one verdict "
            "(exit code 0 or 1)."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_PREFLIGHT_TIMEOUT",
        "preflight_timeout",
        positive_seconds,
        20.0,
        "20",
        f"seconds in (0, {MAX_SECONDS:g}]",
        "How long the preflight waits for every node.",
        short="seconds > 0, ≤ 86400",
    ),
    Variable(
        "TORCHRUN_JSC_PEER_TIMEOUT",
        "peer_timeout",
        peer_seconds,
        60.0,
        "60",
        f"0 (off) or seconds in {MIN_PEER_TIMEOUT:g}..{MAX_SECONDS:g}",
        (
            "A node whose agent has not been heard from for this long is lost: every other "
            "node stops"
            " its workers (SIGTERM, the grace, SIGKILL) and exits non-zero, naming it (heartbeats "
            "through the rendezvous store: one small operation per node every 5 s; the node that "
            "serves the store watches). A rendezvous host that stops answering for this long stops "
            "every node the same way. With restarts left (`--max_restarts`), the job goes on "
            "without a lost node instead (`TORCHRUN_JSC_RECOVERY`). 0: off."
        ),
        short="0, or seconds 10..86400",
    ),
    Variable(
        "TORCHRUN_JSC_EVENTS",
        "events",
        events_target,
        None,
        "in a Slurm job: `torchrun_jsc-<job id>.events.jsonl` in the submit directory; else none",
        "a file, a folder (the file is made in it), or none",
        (
            "The job's event log: the rendezvous host appends one JSON object per line for each"
            " launch, round, lost node, restart, spare joining, handover, requeue, stop and end,"
            " every run of a requeued job to the same file (docs/events.md lists them), and"
            " prints a summary line at each run's end; `python -m torchrun_jsc.report FILE`"
            " shows the whole job. A file that cannot be written costs one line, never the job."
            " `none`: off."
        ),
        short="a file or folder, `none`",
    ),
    Variable(
        "TORCHRUN_JSC_FAILURE_REPORT",
        "failure_report",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: when a worker fails, every agent ends with one line naming the job's first "
            "failure: "
            "node, rank, local rank, exit code or signal (the out-of-memory killer named as such), "
            "time, the message of torch's error file (`@record`), and how many ranks stopped after "
            "it. An agent stopped by SIGTERM, SIGINT, SIGHUP or SIGQUIT (scancel, the time limit) "
            "ends with one line instead of torch's traceback: the signal, its cause when Slurm "
            "knows it, how long the workers took to end (exit code 1, torch's)."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_FORWARD_SIGNALS",
        "forward_signals",
        signal_names,
        FORWARDABLE,
        "USR1,USR2",
        "a comma-separated list of USR1, USR2, or 'none'",
        (
            "Signals the agent passes on to every worker instead of dying of them (torch would, "
            "and leave the workers running). Training goes on only where the script handles the "
            "signal (`signal.signal(signal.SIGUSR1, handler)`); a worker without a handler dies "
            "of it (Python's default) and the job fails. A signal torch is told to handle "
            "(`--signals-to-handle`, 2.10+) stays torch's. With `TORCHRUN_JSC_REQUEUE=1` the "
            "list must include the requeue's signal."
        ),
        short="`USR1`, `USR2`, both (comma-separated), `none`",
    ),
    Variable(
        "TORCHRUN_JSC_TERM_GRACE",
        "term_grace",
        seconds,
        None,
        f"torch's ({TERM_GRACE}, or --shutdown-timeout)",
        f"seconds in 0..{MAX_SECONDS:g}",
        (
            "After SIGTERM/SIGINT (scancel, the time limit) or a failure, how long workers "
            "may take "
            f"to exit before SIGKILL, on every torch release (torch: {TERM_GRACE} s; "
            "`--shutdown-timeout` from "
            "2.12; given both, they must agree)."
        ),
        short="seconds 0..86400",
    ),
    Variable(
        "TORCHRUN_JSC_KILL_ORPHANS",
        "kill_orphans",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: workers die with their agent even when it is killed with SIGKILL (one small "
            "watcher process per agent kills what the agent leaves behind)."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_RECOVERY",
        "recovery",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: with `--max_restarts` > 0 and lost nodes watched, a lost node restarts the "
            "job without it while restarts are left: a spare (an agent beyond `--nnodes`' "
            "maximum, which waits) takes its place, or the job goes on smaller down to "
            "`--nnodes`' minimum; the training script resumes from its checkpoint. 0: a lost "
            "node stops the job (with `--nnodes=MIN:MAX`, torch re-forms it as before)."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_FAILOVER",
        "failover",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: with recovery on (`TORCHRUN_JSC_RECOVERY`, `--max_restarts` > 0), a lost "
            "rendezvous host is survived like any lost node: every other node (the spares "
            "too) stops its workers and starts its agent again, and the next live node of the "
            "last round in node-rank order hosts the next round at its own address and the "
            "same port; the restart count carries over. 0: a lost rendezvous host stops the job."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_WAIT_FOR_HOST",
        "wait_for_host",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: a node keeps trying to reach the rendezvous host until the rendezvous "
            "`join_timeout` "
            f"({JOIN_TIMEOUT} s) runs out, counted from the Slurm step's start, saying so at once"
            f" and every {SAY_EVERY:g} s (torch gives"
            f" up after `read_timeout`, {READ_TIMEOUT} s); a host that starts late waits only as"
            " long as the "
            "others still wait. 0: torch's behaviour."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_RANK_ORDER",
        "rank_order",
        choice("node", "torch"),
        None,
        "node, when this node has a node rank; else torch",
        "'node' or 'torch'",
        (
            "`node`: group ranks, and so the blocks of global ranks, follow the node rank "
            "(node rank "
            "0 is group rank 0; with `--nnodes=MIN:MAX`, in node-rank order among the nodes "
            "present)."
            " `torch`: torch's order, the advertised address as a string (`10.0.0.100` before "
            "`10.0.0.98`). `MASTER_ADDR` is group rank 0's address either way."
        ),
        short="`node`, `torch`",
    ),
    Variable(
        "TORCHRUN_JSC_BACKOFF",
        "backoff",
        switch,
        True,
        "1",
        SWITCH,
        (
            "1: a node whose write of torch's rendezvous state lost (another node's write came"
            f" first) waits a random time before it tries again, up to {BACKOFF_FIRST:g} s at"
            " first and twice as long after each further loss in a row, never longer than half"
            f" torch's keep-alive interval ({KEEP_ALIVE_INTERVAL} s), then reads the state"
            " afresh: fewer tries and bytes when hundreds of nodes join at once. 0: torch's"
            " behaviour (it tries again at once)."
        ),
        short="0, 1",
    ),
    *REQUEUE_VARIABLES,
)

_BY_NAME: Dict[str, Variable] = {v.name: v for v in VARIABLES}
#: Variables torchrun_jsc sets for its own next process (not settings; read by the request).
INTERNAL = (HANDOVER_VARIABLE,)


def variable(name: str) -> Variable:
    """The table row of ``name``."""
    return _BY_NAME[name]


def explain_style(env: Mapping[str, str]) -> Optional[str]:
    """``TORCHRUN_JSC_EXPLAIN`` read leniently: its format, or None when unset or not valid
    (so that errors, a bad value of it among them, can be shown in the format asked for)."""
    var = variable("TORCHRUN_JSC_EXPLAIN")
    try:
        style: Optional[str] = envvars.parsed(env, var.name, var.parse, var.accepted)
    except ConfigError:
        return None
    return style


class Settings(NamedTuple):
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
    peer_timeout: float
    failure_report: bool
    events: Optional[str]
    forward_signals: Tuple[str, ...]
    term_grace: Optional[float]
    kill_orphans: bool
    recovery: bool
    failover: bool
    wait_for_host: bool
    rank_order: Optional[str]
    backoff: bool
    requeue: bool
    requeue_max: int
    requeue_min_run: float
    requeue_grace: float
    requeue_signal: str
    requeue_stop_code: Optional[int]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Read and validate every ``TORCHRUN_JSC_*`` variable."""
        unknown = sorted(
            k
            for k in env
            if k.upper().startswith("TORCHRUN_JSC_") and k not in _BY_NAME and k not in INTERNAL
        )
        if unknown:
            known = ", ".join(v.name for v in VARIABLES)
            name = unknown[0]
            if name.upper() in _BY_NAME or name.upper() in INTERNAL:
                # the environment is case-sensitive: torchrun_jsc_explain is not read at all
                raise ConfigError(
                    f"unknown variable {name}: names are upper case, so it would change nothing;"
                    f" accepted: {name.upper()}"
                )
            raise ConfigError(f"unknown variable {name}; known: {known}")
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
        if settings.requeue and not envvars.value(env, "SLURM_JOB_ID"):
            raise ConfigError(
                "TORCHRUN_JSC_REQUEUE=1 outside a Slurm job (no SLURM_JOB_ID); accepted: 0 or"
                " unset, or 1 in a batch job submitted with sbatch --requeue"
            )
        if settings.requeue and settings.requeue_signal not in settings.forward_signals:
            wanted = settings.requeue_signal[3:]
            forward = envvars.shown(envvars.value(env, "TORCHRUN_JSC_FORWARD_SIGNALS") or "")
            raise ConfigError(
                f"TORCHRUN_JSC_REQUEUE=1 with TORCHRUN_JSC_FORWARD_SIGNALS={forward}:"
                f" the agent would not pass SIG{wanted} (TORCHRUN_JSC_REQUEUE_SIGNAL) on, so the"
                " workers would never be told to save before the requeue; accepted: a"
                f" TORCHRUN_JSC_FORWARD_SIGNALS that includes {wanted} (the default is USR1,USR2),"
                " or TORCHRUN_JSC_REQUEUE=0"
            )
        return settings

    @classmethod
    def defaults(cls) -> Settings:
        """Every setting at its default."""
        return cls.from_env({})

    def signal_numbers(self) -> Tuple[int, ...]:
        """``forward_signals`` as numbers."""
        return tuple(int(getattr(signal, name)) for name in self.forward_signals)


def markdown_table() -> str:
    """The README's settings table (between ``<!-- settings:begin/end -->``), from
    :data:`VARIABLES`: ``python -c "from torchrun_jsc.settings.table import markdown_table as t;
    print(t())"`` prints it."""
    lines = ["| variable | default | accepted | meaning |", "|---|---|---|---|"]
    for var in VARIABLES:
        lines.append(f"| `{var.name}` | {var.shown_default} | {var.short} | {var.meaning} |")
    return "\n".join(lines)
