"""All versions: how long workers may take to exit after SIGTERM (scancel, the time limit, a
failure) before SIGKILL: ``TORCHRUN_JSC_TERM_GRACE`` instead of torch's 30 s (before 2.12 not
settable from torchrun)."""

from __future__ import annotations

import functools
from typing import Any

from ..torch_defaults import TERM_GRACE
from ._common import PROCESSES, Check, replace, verified

CHECKS = (
    Check(
        PROCESSES,
        "PContext.close",
        (("self", "death_sig", "timeout"),),
    ),
)


def install(seconds: float) -> None:
    """Make every ``PContext.close`` wait ``seconds`` before SIGKILL."""
    [(owner, attr, original)] = verified(CHECKS)

    @functools.wraps(original)
    def close(self: Any, death_sig: Any = None, timeout: float = TERM_GRACE) -> Any:
        return original(self, death_sig, seconds)

    replace(owner, attr, close)
