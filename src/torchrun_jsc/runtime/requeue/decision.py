"""Requeue decisions (pure): whether the job goes back into Slurm's queue, which nodes its next
run must not use, the ``scontrol`` commands that do it, and the one line every node prints.

The requeue (``TORCHRUN_JSC_REQUEUE=1``) judges by cause, within ``TORCHRUN_JSC_REQUEUE_MAX``
requeues of one job (Slurm's ``SLURM_RESTART_COUNT`` counts them):

* Slurm's warning signal before the time limit (``--signal=USR1@300``): requeued whatever the
  run's length, but not in the run's first :data:`EARLY_WARNING` seconds, nor, if shorter, its
  first ``TORCHRUN_JSC_REQUEUE_MIN_RUN`` seconds (``--signal``'s offset is then longer than the
  job's time limit, and every run would end so).
* a node lost (declared lost by the job watch, or vanished) that the next run leaves out:
  requeued whatever the run's length; not by a group too small to go on (the others may be
  training on) unless Slurm says the lost nodes are down.
* a failure of the training script itself (a worker's exit code, every node alive): requeued
  after a run of ``TORCHRUN_JSC_REQUEUE_MIN_RUN`` seconds or more (a script that fails at once
  would requeue forever), never after the exit code ``TORCHRUN_JSC_REQUEUE_STOP_CODE``.

Without nodes to exclude the job is requeued in one step (``scontrol requeue``). With them it is
requeued held, its excluded nodes are updated, and it is released: the exclusion is in place
before the job can be scheduled again.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..records.report import FAILED, ITSELF, LOST, Record, first_failure


class Budget(NamedTuple):
    """What the plan gives the agent for its requeue decisions."""

    job: str
    #: Requeues of this job so far (``SLURM_RESTART_COUNT``).
    done: int = 0
    most: int = 3
    min_run: float = 600.0
    grace: float = 120.0
    signal: str = "SIGUSR1"
    #: A worker's exit code that ends the chain of requeues (None: none does).
    stop_code: Optional[int] = 99
    #: This node's rank, and the Slurm name of the rendezvous host's node ("" unknown): when
    #: the host is lost, the next node ranks requeue in its place, without it.
    node_rank: Optional[int] = None
    host: str = ""
    #: The Slurm names of the nodes lost before this process (a handover moved the store,
    #: and what it knew with it): the rendezvous hosts, and the nodes that left earlier
    #: rounds. Left out too.
    lost_before: Tuple[str, ...] = ()


def left_out(budget: Budget, departed: Sequence[str], lost: Sequence[str]) -> List[str]:
    """The nodes a requeue leaves out, each once: those lost before this process, those that
    left this process's rounds (``departed``), then ``lost`` now."""
    return list(dict.fromkeys([*budget.lost_before, *departed, *lost]))


#: When the rendezvous host is lost, these node ranks requeue in its place, one after another
#: (each looks first whether one before it did): enough for two more lost nodes, few enough
#: that Slurm is not asked by every node.
STAND_INS = (1, 2, 3)
#: Seconds between two stand-ins' turns.
STAND_IN_STEP = 5.0


def lost_itself(records: Sequence[Record]) -> bool:
    """Whether this node's own records say it did not run (frozen, suspended) for the peer
    timeout: the others stopped the job or went on without it, and what it lost since (its
    peers, its host's answers) says nothing about them."""
    return any(r.kind == LOST and r.what.startswith(ITSELF) for r in records)


def stand_in_delay(budget: Budget) -> Optional[float]:
    """How long this node waits before it requeues for a lost host; None: it does not."""
    if budget.node_rank not in STAND_INS:
        return None
    return STAND_INS.index(budget.node_rank) * STAND_IN_STEP


def host_lost(records: Sequence[Record]) -> bool:
    """Whether this node's own records say it lost the rendezvous host."""
    return any(r.kind == LOST and r.what.startswith("the rendezvous host") for r in records)


class Verdict(NamedTuple):
    """Whether to requeue, and why not when not."""

    requeue: bool
    why_not: str = ""


#: The causes of a requeue.
WARNING = "warning"
LOST_NODE = "lost node"
SCRIPT = "script"
#: Slurm's warning this early in a run (seconds; at most the minimum run) is refused: the
#: offset is too long.
EARLY_WARNING = 60.0


def cause_of(records: Sequence[Record]) -> str:
    """The cause a failure is judged by: :data:`LOST_NODE` when the job's first failure is a
    lost node (or host), else :data:`SCRIPT`."""
    root = first_failure(records)
    return LOST_NODE if root is not None and root.kind == LOST else SCRIPT


def verdict(
    budget: Budget, ran: float, cause: str = SCRIPT, records: Sequence[Record] = ()
) -> Verdict:
    """Whether a run that trained for ``ran`` seconds is requeued after ``cause`` (for a
    failure, ``records`` hold its first failure)."""
    if budget.done >= budget.most:
        return Verdict(
            False,
            f"{budget.done} of {budget.most} requeues done (TORCHRUN_JSC_REQUEUE_MAX="
            f"{budget.most})",
        )
    if cause == WARNING:
        if ran < min(EARLY_WARNING, budget.min_run):
            return Verdict(
                False,
                f"Slurm's warning ({budget.signal}) came {ran:.0f} s into the run: --signal's"
                " offset is longer than the job's time limit (give --signal=USR1@N an N well"
                " below --time)",
            )
        return Verdict(True)
    if cause == LOST_NODE:
        return Verdict(True)
    root = first_failure(records)
    code = None if root is None or root.kind != FAILED else root.exitcode
    if code is not None and code == budget.stop_code:
        return Verdict(
            False,
            f"the training script exited with code {code} (TORCHRUN_JSC_REQUEUE_STOP_CODE):"
            " it asks not to be requeued",
        )
    if ran < budget.min_run:
        return Verdict(
            False,
            f"the training script failed after {ran:.0f} s, less than"
            f" TORCHRUN_JSC_REQUEUE_MIN_RUN={budget.min_run:g} s (a script that fails at"
            " once would be requeued again and again)",
        )
    return Verdict(True)


#: Slurm node states (``scontrol show node``'s ``State``) that say a node is gone.
_GONE = ("DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN")


def nodes_gone(output: str, names: Sequence[str]) -> bool:
    """Whether ``scontrol -o show node`` (``output``) says every one of ``names`` is down or
    not responding (a state with ``*`` is not responding)."""
    states = dict(re.findall(r"(?:^|\s)NodeName=(\S+).*?\sState=(\S+)", output, re.M))
    if not names:
        return False
    for name in names:
        state = states.get(short_name(name))
        if state is None:
            return False
        words = state.upper().split("+")
        if not (state.endswith("*") or any(w.rstrip("*") in _GONE for w in words)):
            return False
    return True


def short_name(hostname: str) -> str:
    """A node's Slurm name from its hostname (the part before the first dot)."""
    return hostname.split(".", 1)[0]


def excluded(current: str, lost: Sequence[str]) -> str:
    """The job's excluded nodes (``ExcNodeList``, a Slurm host list or ``(null)``) with the
    ``lost`` nodes added, each once."""
    have = [] if current in ("", "(null)") else [current]
    names = _plain_names(current)
    for name in lost:
        short = short_name(name)
        if short and short not in names:
            names.add(short)
            have.append(short)
    return ",".join(have)


def _plain_names(hostlist: str) -> set[str]:
    """The names a host list spells out without brackets (``node1,node3``); a bracketed range
    (``node[1-3]``) is Slurm's to expand, and adding one of its names again is harmless."""
    return {part for part in re.split(r",(?![^\[]*\])", hostlist) if part and "[" not in part}


def commands(job: str, exclude: str) -> Tuple[Tuple[str, ...], ...]:
    """The ``scontrol`` calls that requeue ``job``, excluding ``exclude`` (a host list, or
    empty) from its next run."""
    if not exclude:
        return (("scontrol", "requeue", job),)
    return (
        ("scontrol", "requeuehold", job),
        ("scontrol", "update", f"JobId={job}", f"ExcNodeList={exclude}"),
        ("scontrol", "release", job),
    )


class JobFacts(NamedTuple):
    """What ``scontrol -o show job`` says that the requeue needs."""

    requeue: Optional[bool]
    excluded: str
    batch: Optional[bool]
    restarts: Optional[int] = None


def job_facts(output: str) -> JobFacts:
    """The job's ``Requeue``, ``ExcNodeList``, ``BatchFlag`` and ``Restarts`` fields."""
    fields = dict(re.findall(r"(?:^|\s)(Requeue|ExcNodeList|BatchFlag|Restarts)=(\S*)", output))

    def flag(name: str) -> Optional[bool]:
        value = fields.get(name)
        return None if value is None else value == "1"

    restarts = fields.get("Restarts", "")
    return JobFacts(
        flag("Requeue"),
        fields.get("ExcNodeList", "(null)"),
        flag("BatchFlag"),
        int(restarts) if restarts.isdigit() else None,
    )


def requeued_already(budget: Budget, facts: Optional[JobFacts]) -> bool:
    """Whether Slurm counts a requeue of this run already (another node did it)."""
    return facts is not None and facts.restarts is not None and facts.restarts > budget.done


def refusal(facts: Optional[JobFacts], command: Sequence[str], error: str) -> str:
    """Why Slurm did not requeue the job, and the fix."""
    if facts is not None and facts.batch is False:
        return "the job is not a batch job (salloc or srun alone): submit it with sbatch"
    if facts is not None and facts.requeue is False:
        return "the job is not requeueable: submit it with sbatch --requeue"
    said = " ".join(error.split()) or "no answer"
    return (
        f"Slurm refused it ({' '.join(command)}: {said}); check that the job is requeueable"
        " (sbatch --requeue) and that this Slurm lets users requeue their jobs"
    )


def done_line(budget: Budget, cause: str, exclude: Sequence[str]) -> str:
    """``torchrun_jsc: requeue 1 of 3: job 12 after SIGUSR1 ...; the next run resumes ...``."""
    without = f", without {', '.join(exclude)}" if exclude else ""
    return (
        f"torchrun_jsc: requeue {budget.done + 1} of {budget.most}: job {budget.job} requeued"
        f" after {cause}{without}; its next run resumes from the checkpoint"
    )


def no_line(why_not: str) -> str:
    """``torchrun_jsc: no requeue: ...``."""
    return f"torchrun_jsc: no requeue: {why_not}"


def signal_cause(budget: Budget) -> str:
    """The time-limit warning as the cause of a requeue."""
    return f"{budget.signal} (Slurm's warning before the time limit)"


def lost_names(records: Sequence[Record]) -> List[str]:
    """The Slurm names of the nodes the job watch declared lost among ``records``, each once,
    in order (a record of what a node lost itself, its host or its own run, names no other
    node)."""
    names: List[str] = []
    for record in records:
        short = short_name(record.hostname)
        if record.kind == LOST and not record.what and short and short not in names:
            names.append(short)
    return names
