"""All versions: start every worker through a small guard (:mod:`torchrun_jsc.runtime.workers`)
that kills it when the agent dies (even by SIGKILL) and gives it its own session (as torch >= 2.2
does), and register it so signals can be passed on to it."""

from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

from ..runtime import workers
from ._common import Check, replace, verified

CHECKS = (
    Check(
        "torch.distributed.elastic.multiprocessing.api",
        "SubprocessHandler._popen",
        (("self", "args", "env"),),
    ),
)


def install(pdeathsig: bool, new_session: bool) -> None:
    """Wrap torch's ``SubprocessHandler._popen`` (the same class in every module that names
    it)."""
    [(owner, attr, original)] = verified(CHECKS)

    @functools.wraps(original)
    def _popen(self: Any, args: Tuple[str, ...], env: Dict[str, str]) -> Any:
        if pdeathsig or new_session:
            args = workers.guarded(args, pdeathsig, new_session)
        proc = original(self, args, env)
        workers.register(proc)
        return proc

    replace(owner, attr, _popen)
