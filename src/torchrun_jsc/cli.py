"""The ``torchrun_jsc`` command: torchrun's command line, fixed, run in this process.

Exit codes: torchrun's own when it runs; 2 for bad input (one line on stderr, nothing
launched) and refused launches; 130 when interrupted before the launch; ``TORCHRUN_JSC_EXPLAIN``:
1 when the plan predicts a failure; ``TORCHRUN_JSC_PREFLIGHT``: 1 when the job-wide check fails;
141 when the reader of what it prints (``--help``, ``--version``, explain) goes away early
(``| head``), as for a command that SIGPIPE ends.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, List, Mapping, NoReturn, Optional

from . import __version__
from .backend_name import FIRST
from .backend_name import NAME as BACKEND
from .errors import ConfigError, UnsupportedTorchError
from .handover import VARIABLE as HANDOVER
from .settings.table import VARIABLES, explain_style

if TYPE_CHECKING:
    from .plan import Prepared

#: The project's source repository: its README and docs/ are the documentation.
REPOSITORY = "https://github.com/HelmholtzAI-FZJ/torchrun_jsc"
#: Widest line of the ``--help`` section.
HELP_WIDTH = 100
#: The exit code when standard output's reader has gone (``torchrun_jsc --help | head -n 1``):
#: what a shell reports for a command ended by SIGPIPE (128 + 13).
PIPE_CLOSED = 141


def main(argv: Optional[List[str]] = None) -> None:
    """Read, plan, apply, then run ``torch.distributed.run.main`` with the planned arguments."""
    from .runtime import agent

    args = list(sys.argv[1:] if argv is None else argv)
    early_stop = agent.runtime().early_stop
    early_stop.install(os.environ)  # a stop before torch's handlers is one line too
    try:
        _main(args, os.environ)
    except KeyboardInterrupt:
        early_stop.interrupted()


def _main(args: List[str], env: Mapping[str, str]) -> None:
    from . import log
    from .apply import carry_out, prepare

    log.setup(env)
    style = explain_style(env)
    gone = _cwd_problem()
    if gone is not None:
        fail(gone, style)
    _import_torch()
    try:
        prepared = prepare(args, env)
    except (ConfigError, UnsupportedTorchError) as exc:
        fail(str(exc), style)
    request, plan = prepared.request, prepared.plan
    if plan.error is not None:
        fail(plan.error, style)
    if request.version_requested:
        _say(version_line())
        sys.exit(0)
    if request.stop is not None and style is None:
        if request.stop.code == 0:
            _say(request.stop.text.rstrip("\n") + "\n" + settings_help())
            sys.exit(0)
        sys.stderr.write(request.stop.text)
        sys.exit(request.stop.code)
    if style is not None:
        from .explain import exit_code, render

        show(render(prepared, style))
        sys.exit(exit_code(prepared))
    if plan.refusal is not None:
        fail(plan.refusal, None)
    if request.settings.preflight:
        from .preflight import run_preflight

        sys.exit(run_preflight(prepared))
    from .runtime import agent
    from .runtime.failover.relaunch import Command

    _early_stops(prepared)
    # before carry_out changes the environment
    agent.runtime().command = Command.of(args, env, sys.argv[0])
    os.environ.pop(HANDOVER, None)  # read once; not for the workers
    carry_out(plan)
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

    try:
        run.main(list(plan.argv))
    except SignalException as exc:
        if not any(p.name == "stop_signal" for p in plan.patches):
            raise
        _stopped_by(int(exc.sigval), env)
    except RendezvousConnectionError as exc:
        endpoint = request.endpoint.text if request.endpoint is not None else None
        line = port_in_use(exc, endpoint)
        if line is None:
            raise
        print(f"torchrun_jsc: error: {line}", file=sys.stderr, flush=True)
        sys.exit(1)


#: What torch's store (all versions) says when its port is taken.
_IN_USE = ("EADDRINUSE", "Address already in use", "address already in use")


def port_in_use(exc: BaseException, endpoint: Optional[str]) -> Optional[str]:
    """The line for a rendezvous host whose store cannot listen because its port is taken
    (torch's error, or one it was raised from, says so), else None."""
    seen: Optional[BaseException] = exc
    for _ in range(8):  # the chain of causes is short; bounded all the same
        if seen is None:
            return None
        if any(word in str(seen) for word in _IN_USE):
            break
        seen = seen.__cause__ or seen.__context__
    else:
        return None
    where = f"--rdzv_endpoint={endpoint}" if endpoint else "the rendezvous endpoint"
    return (
        f"the rendezvous host cannot listen on the port of {where}: the port is already in use"
        " on this node (another job's rendezvous, or another program); choose another port"
        " in --rdzv_endpoint, one of this job's own (e.g. 29500 + SLURM_JOB_ID % 1000)"
    )


def _early_stops(prepared: Prepared) -> None:
    """Until the first worker, only the signals torch will then handle are stopped here; those
    other than SIGINT only with the ``stop_signal`` patch (one line for a stop)."""
    from .request import handled_signals
    from .runtime import agent
    from .runtime.signals.signalled import STOP_SIGNALS

    options = prepared.request.options
    given = options.signals_to_handle if options is not None else None
    torchs = handled_signals(given) if given is not None else STOP_SIGNALS
    one_line = any(p.name == "stop_signal" for p in prepared.plan.patches)
    agent.runtime().early_stop.keep_only(n for n in torchs if n == "SIGINT" or one_line)


def _stopped_by(sigval: int, env: Mapping[str, str]) -> NoReturn:
    """The one line of an agent stopped by a signal (torch has stopped the workers), then
    torch's exit code; the job watch's last line, if any, follows at the exit."""
    import time

    from .runtime import agent
    from .runtime.events.entry import STOP
    from .runtime.signals import signalled

    job = env.get("SLURM_JOB_ID")
    state = signalled.ask_slurm(job) if job else None
    seen = agent.runtime().stops.first()
    line = signalled.line(sigval, env, state, time.monotonic(), seen)
    print(line, file=sys.stderr, flush=True)
    session = agent.runtime().session
    if session is not None:  # where this node writes the event log
        session.note(STOP, {"cause": line.removeprefix("torchrun_jsc: ")})
    signalled.ignore_further()
    sys.exit(signalled.EXIT_CODE)


def _cwd_problem() -> Optional[str]:
    """Why the launch cannot start in the current directory (None: it can): one that was
    removed after the shell entered it (torch's own import fails there, in C++)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return (
            "the current directory no longer exists (removed after the shell entered it), so"
            " neither torch nor a relative script path can be loaded; accepted: start"
            " torchrun_jsc in an existing directory"
        )
    return None


def _import_torch() -> None:
    """Import torch with SIGINT held until it is done: a Ctrl-C in the middle of torch's import
    leaves half-initialised extension modules behind (a traceback, or death by the signal); held,
    it becomes the one-line interruption at once after. A SIGINT ignored on entry (``nohup``, a
    shell's background job) stays ignored."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        import torch

        return
    held: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        import torch  # noqa: F401
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def fail(message: str, style: Optional[str]) -> NoReturn:
    """End with exit code 2 after one line naming what was wrong: ``torchrun_jsc: error: ...``
    on standard error, or explain's error in its format when explain was asked for."""
    if style is not None:
        from .explain import render_error

        show(render_error(message, style))
    else:
        print(f"torchrun_jsc: error: {message}", file=sys.stderr)
    sys.exit(2)


def show(text: str) -> None:
    """Print explain's output (:func:`~torchrun_jsc.explain.for_stream`)."""
    from .explain import for_stream

    _say(for_stream(text, sys.stdout))


def _say(text: str) -> None:
    """Print ``text`` on standard output, flushed; when its reader has gone (``| head -n 1``),
    end quietly with :data:`PIPE_CLOSED` instead of a ``BrokenPipeError`` traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # what is still buffered must not be written at the exit either (a second error)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(PIPE_CLOSED)


def version_line() -> str:
    """``torchrun_jsc 0.2.0 (torch 2.13.0+cpu, Python 3.11.7)``."""
    import platform

    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:  # pragma: no cover - torch is a dependency
        torch_version = "not installed"
    return f"torchrun_jsc {__version__} (torch {torch_version}, Python {platform.python_version()})"


def settings_help() -> str:
    """The section ``--help`` prints after torchrun's own help: every setting with what it
    accepts and its default, then where the documentation is."""
    import textwrap

    width = max(len(v.name) for v in VARIABLES)
    lines = [
        "",
        "torchrun_jsc: the options above are torchrun's and keep their meaning. torchrun_jsc",
        "itself is set by environment variables: what each accepts, then its default in brackets",
        "(empty counts as unset; the switches, 0 and 1, also take any integer, 0 being off, and",
        "true/false, yes/no, on/off):",
        "",
    ]
    for var in VARIABLES:
        entry = f"{var.name:<{width}}  {var.short.replace('`', '')}  [{var.shown_default}]"
        lines += textwrap.wrap(
            entry,
            width=HELP_WIDTH,
            initial_indent="  ",
            subsequent_indent=" " * (width + 4),
            break_long_words=False,
            break_on_hyphens=False,
        )
    lines += [
        "",
        "  --version (before the training script) prints torchrun_jsc's and torch's versions.",
        f"  --rdzv-backend={BACKEND}: read as c10d here; launchers built on torchrun"
        " (torchrun itself,",
        "  accelerate launch) get torchrun_jsc's fixes and settings with it"
        f" (torch >= {FIRST[0]}.{FIRST[1]}).",
        "",
        "What each setting does, recipes and troubleshooting (online):",
        f"  {REPOSITORY}#readme",
        f"  {REPOSITORY}/tree/main/docs",
        "Offline, the README of this installed version: python -m torchrun_jsc.readme",
    ]
    return "\n".join(lines)
