"""The ``torchrun_jsc`` command: torchrun's command line, fixed, run in this process.

Exit codes: torchrun's own when it runs; 2 for bad input (one line on stderr, nothing
launched) and refused launches; 130 when interrupted before the launch; ``TORCHRUN_JSC_EXPLAIN``:
1 when the plan predicts a failure; ``TORCHRUN_JSC_PREFLIGHT``: 1 when the job-wide check fails.
"""

from __future__ import annotations

import os
import sys
from typing import List, Mapping, NoReturn, Optional

from . import __version__
from .errors import ConfigError, UnsupportedTorchError
from .settings import VARIABLES

DOCS = "https://pypi.org/project/torchrun_jsc/ (README) and the docs/ folder of its source"


def main(argv: Optional[List[str]] = None) -> None:
    """Read, plan, apply, then run ``torch.distributed.run.main`` with the planned arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        _main(args, os.environ)
    except KeyboardInterrupt:
        print("torchrun_jsc: interrupted before the launch; nothing was started", file=sys.stderr)
        sys.exit(130)


def _main(args: List[str], env: Mapping[str, str]) -> None:
    from . import log
    from .apply import carry_out, prepare

    log.setup(env)
    style = _explain_style(env)
    _import_torch()
    try:
        prepared = prepare(args, env)
    except (ConfigError, UnsupportedTorchError) as exc:
        _error(str(exc), style)
    request, plan = prepared.request, prepared.plan
    if request.version_requested:
        print(version_line())
        sys.exit(0)
    if request.stop is not None and style is None:
        if request.stop.code == 0:
            print(request.stop.text.rstrip("\n"))
            print(settings_help())
            sys.exit(0)
        sys.stderr.write(request.stop.text)
        sys.exit(request.stop.code)
    if style is not None:
        from .explain import render

        _print(render(prepared, style))
        if plan.refusal is not None or request.stop is not None:
            sys.exit(2)
        sys.exit(1 if plan.predicted_failures else 0)
    if plan.launch_error is not None:
        _error(plan.launch_error, None)
    if plan.refusal is not None:
        _error(plan.refusal, None)
    if request.settings.preflight:
        from .preflight import run_preflight

        sys.exit(run_preflight(prepared))
    carry_out(plan)
    from torch.distributed import run

    run.main(list(plan.argv))


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


def _explain_style(env: Mapping[str, str]) -> Optional[str]:
    """The explain format asked for, read leniently (to render errors in it as well)."""
    style = env.get("TORCHRUN_JSC_EXPLAIN", "").strip()
    return style if style in ("text", "json") else None


def _error(message: str, style: Optional[str]) -> NoReturn:
    if style is not None:
        from .explain import render_error

        _print(render_error(message, style))
    else:
        print(f"torchrun_jsc: error: {message}", file=sys.stderr)
    sys.exit(2)


def _print(text: str) -> None:
    """Print explain's output; a character the terminal's encoding lacks is written escaped
    (``\\xfc``) instead of ending in ``UnicodeEncodeError``."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))


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
    """The section ``--help`` prints after torchrun's own help."""
    width = max(len(v.name) for v in VARIABLES)
    lines = [
        "",
        "torchrun_jsc: the options above are torchrun's and keep their meaning. torchrun_jsc",
        "itself is set by environment variables (default in brackets):",
        "",
    ]
    lines += [f"  {v.name:<{width}}  [{v.shown_default}]" for v in VARIABLES]
    lines += [
        "",
        "  --version (before the training script) prints torchrun_jsc's and torch's versions.",
        f"Documentation: {DOCS}.",
    ]
    return "\n".join(lines)
