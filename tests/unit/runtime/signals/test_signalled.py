"""A stop by a signal: the one line (from what Slurm says of the job), and the patch that lets
only the first signal interrupt torch."""

from __future__ import annotations

import signal
from typing import Any, List, Optional

import pytest

from torchrun_jsc.runtime.signals import signalled
from torchrun_jsc.runtime.signals.signalled import JobInfo

SCONTROL = (
    "JobId=7 JobName=x UserId=root(0) GroupId=root(0) Priority=1 JobState={state} Reason={reason}"
    " Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime={ran}"
    " TimeLimit={limit} TimeMin=N/A"
)


@pytest.mark.parametrize(
    "state, reason, ran, limit, cause",
    [
        (
            "COMPLETING",
            "None",
            "00:00:07",
            "00:01:00",
            "the job was cancelled (scancel) or lost a node",
        ),
        ("COMPLETING", "TimeLimit", "00:01:10", "00:01:00", "the job reached its time limit"),
        ("COMPLETING", "None", "1-00:00:00", "1-00:00:00", "the job reached its time limit"),
        (
            "COMPLETING",
            "None",
            "00:00:07",
            "UNLIMITED",
            "the job was cancelled (scancel) or lost a node",
        ),
        ("CANCELLED", "None", "00:00:07", "00:01:00", "the job was cancelled (scancel)"),
        ("TIMEOUT", "None", "00:01:00", "00:01:00", "the job reached its time limit"),
        ("NODE_FAIL", "None", "00:00:07", "00:01:00", "a node of the job failed"),
        ("PREEMPTED", "None", "00:00:07", "00:01:00", "the job was preempted"),
        (
            "RUNNING",
            "None",
            "00:00:07",
            "00:01:00",
            "the step was cancelled (scancel of the step, or srun ended it)",
        ),
        ("PENDING", "None", "00:00:00", "00:01:00", None),
    ],
)
def test_what_slurm_says_of_the_stop(
    state: str, reason: str, ran: str, limit: str, cause: Optional[str]
) -> None:
    info = signalled.job_info(SCONTROL.format(state=state, reason=reason, ran=ran, limit=limit))
    assert info is not None and info.state == state
    assert signalled.slurm_cause(info) == cause


@pytest.mark.parametrize(
    "text, seconds",
    [("00:00:07", 7), ("10:00", 600), ("1-02:03:04", 93784), ("UNLIMITED", None), ("", None)],
)
def test_slurm_times(text: str, seconds: Optional[float]) -> None:
    assert signalled.seconds(text) == seconds


def test_no_job_state_in_garbage() -> None:
    assert signalled.job_info("scontrol: error: Invalid job id specified") is None


def test_the_line() -> None:
    stops = signalled.Stops()
    assert stops.note(signal.SIGTERM) and not stops.note(signal.SIGTERM)
    seen = stops.first()
    assert seen is not None
    at = seen[1]
    cancelled = JobInfo("COMPLETING", 7.0, 60.0)
    assert signalled.line(signal.SIGTERM, {"SLURM_JOB_ID": "7"}, cancelled, at + 1.24, seen) == (
        "torchrun_jsc: stopped by SIGTERM from Slurm (the job was cancelled (scancel) or lost a"
        " node); workers ended after 1.2 s"
    )
    assert signalled.line(signal.SIGINT, {}, None, at + 0.5, seen) == (
        "torchrun_jsc: stopped by SIGINT; workers ended after 0.5 s"
    )
    assert signalled.line(signal.SIGHUP, {"SLURM_JOB_ID": "7"}, None, at, seen) == (
        "torchrun_jsc: stopped by SIGHUP (inside Slurm job 7, its state unknown); workers ended"
        " after 0.0 s"
    )
    assert signalled.line(signal.SIGTERM, {}, None, 0.0) == "torchrun_jsc: stopped by SIGTERM"


def test_only_the_first_signal_interrupts_torch() -> None:
    """The second SIGTERM of a cancel used to raise again inside torch's shutdown (a second
    traceback, '--- Logging error ---')."""
    from torch.distributed.elastic.multiprocessing import api

    from torchrun_jsc import patches
    from torchrun_jsc.patches import params
    from torchrun_jsc.runtime import agent

    assert patches.install(params.StopSignal()) is None
    try:
        handler: Any = api._terminate_process_handler
        with pytest.raises(api.SignalException):
            handler(signal.SIGTERM, None)
        assert handler(signal.SIGTERM, None) is None  # noted, torch's shutdown goes on
        assert handler(signal.SIGINT, None) is None
        first = agent.runtime().stops.first()
        assert first is not None and first[0] == signal.SIGTERM
    finally:
        patches.restore_all()
    assert api._terminate_process_handler is not handler
    assert agent.runtime().stops.first() is None  # a new runtime after restore_all


def test_after_the_line_further_stop_signals_are_ignored() -> None:
    before: List[Any] = [signal.getsignal(getattr(signal, n)) for n in signalled.STOP_SIGNALS]
    try:
        signalled.ignore_further()
        for name in signalled.STOP_SIGNALS:
            assert signal.getsignal(getattr(signal, name)) is signal.SIG_IGN
    finally:
        for name, handler in zip(signalled.STOP_SIGNALS, before):
            signal.signal(getattr(signal, name), handler)


def test_a_held_stop_raises_nothing_the_agent_ends_by_itself() -> None:
    """A requeue brings Slurm's SIGTERM; the requeuing agent ends by itself with its line."""
    from torch.distributed.elastic.multiprocessing import api

    from torchrun_jsc import patches
    from torchrun_jsc.patches import params
    from torchrun_jsc.runtime import agent

    assert patches.install(params.StopSignal()) is None
    stops = agent.runtime().stops
    try:
        handler: Any = api._terminate_process_handler
        stops.hold()
        assert handler(signal.SIGTERM, None) is None
        assert stops.first() is None  # not a stop: no stop line
    finally:
        patches.restore_all()
    assert not agent.runtime().stops.held()
