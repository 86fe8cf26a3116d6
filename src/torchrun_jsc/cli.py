"""The ``torchrun_jsc`` command: torchrun's command line, fixed, run in this process."""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from .errors import ConfigError, UnsupportedTorchError


def main(argv: Optional[List[str]] = None) -> None:
    """Plan, apply, then run ``torch.distributed.run.main`` with the planned arguments.

    Bad input: one line on stderr, exit code 2, nothing launched. ``TORCHRUN_JSC_EXPLAIN``:
    print the plan and exit (1 when it predicts a failure).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    from .apply import carry_out, prepare

    try:
        prepared = prepare(args, os.environ)
    except (ConfigError, UnsupportedTorchError) as exc:
        print(f"torchrun_jsc: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if prepared.settings.preflight:
        from .preflight import run_preflight

        sys.exit(run_preflight(prepared, args, os.environ))
    if prepared.settings.explain:
        from .explain import render

        print(render(prepared, prepared.settings.explain))
        sys.exit(1 if prepared.plan.predicted_failures else 0)
    carry_out(prepared.plan)
    from torch.distributed import run

    run.main(list(prepared.plan.argv))
