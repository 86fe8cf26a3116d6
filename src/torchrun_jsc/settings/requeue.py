"""The ``TORCHRUN_JSC_REQUEUE*`` rows of the settings table (:mod:`torchrun_jsc.settings.table`):
requeueing the job from its checkpoint when its allocation cannot go on."""

from __future__ import annotations

from typing import Tuple

from .values import (
    FORWARDABLE,
    MAX_SECONDS,
    SWITCH,
    Variable,
    count,
    exit_code_or_none,
    one_signal,
    seconds,
    switch,
)

#: The most requeues a job may be given.
MAX_REQUEUES = 1000
#: The exit code with which a training script asks not to be requeued.
STOP_CODE = 99

#: The requeue's rows of the settings table.
REQUEUE_VARIABLES: Tuple[Variable, ...] = (
    Variable(
        "TORCHRUN_JSC_REQUEUE",
        "requeue",
        switch,
        False,
        "0",
        SWITCH,
        (
            "1 (in a Slurm batch job submitted with `--requeue`): the job goes back into the"
            " queue and starts again from its checkpoint after Slurm's warning signal before the"
            " time limit (`#SBATCH --signal=USR1@300`; the workers get it and have"
            " `TORCHRUN_JSC_REQUEUE_GRACE` to save and end) and after a failure it cannot"
            " recover from inside its allocation (the nodes it lost are excluded from the next"
            " run). One node requeues; every node says so in one line. 0: off."
        ),
        short="0, 1",
    ),
    Variable(
        "TORCHRUN_JSC_REQUEUE_MAX",
        "requeue_max",
        count(MAX_REQUEUES),
        3,
        "3",
        f"an integer in 0..{MAX_REQUEUES}",
        "The most requeues of one job (Slurm's `SLURM_RESTART_COUNT` counts them).",
        short=f"integer 0..{MAX_REQUEUES}",
    ),
    Variable(
        "TORCHRUN_JSC_REQUEUE_MIN_RUN",
        "requeue_min_run",
        seconds,
        600.0,
        "600",
        f"seconds in 0..{MAX_SECONDS:g}",
        (
            "After a failure of the training script itself (a worker's exit code, every node"
            " alive), a run that ended sooner than this after its agents started is not"
            " requeued (a script that fails at once would be requeued again and again). A lost"
            " node requeues whatever the run's length, Slurm's warning after the run's first"
            " 60 s (or this, if shorter)."
        ),
        short="seconds 0..86400",
    ),
    Variable(
        "TORCHRUN_JSC_REQUEUE_STOP_CODE",
        "requeue_stop_code",
        exit_code_or_none,
        STOP_CODE,
        str(STOP_CODE),
        "an exit code in 1..255, or none",
        (
            "A worker that exits with this code ends the chain of requeues: the job is not"
            " requeued after it (a script that knows it cannot make progress says so)."
            " `none`: every failure may requeue."
        ),
        short="exit code 1..255, `none`",
    ),
    Variable(
        "TORCHRUN_JSC_REQUEUE_GRACE",
        "requeue_grace",
        seconds,
        120.0,
        "120",
        f"seconds in 0..{MAX_SECONDS:g}",
        (
            "After the warning signal, how long the workers have to save a checkpoint and end"
            " before they are stopped and the job is requeued (give `--signal=USR1@N` an N"
            " well above it)."
        ),
        short="seconds 0..86400",
    ),
    Variable(
        "TORCHRUN_JSC_REQUEUE_SIGNAL",
        "requeue_signal",
        one_signal,
        "SIGUSR1",
        "USR1",
        f"one of {', '.join(n[3:] for n in FORWARDABLE)}",
        (
            "The warning signal that requeues the job (the one `--signal` names). It reaches"
            " the workers once, as `TORCHRUN_JSC_FORWARD_SIGNALS` says."
        ),
        short="`USR1`, `USR2`",
    ),
)
