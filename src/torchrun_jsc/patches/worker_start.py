"""All versions: register every worker torch starts (so signals can be passed on to it; its
command line goes to :meth:`~torchrun_jsc.runtime.processes.workers.Workers.starting` first),
hand it to this agent's orphan watcher (:mod:`torchrun_jsc.runtime.processes.orphans`: it dies with
the agent, even by SIGKILL), and, before torch 2.2, start it in its own session as torch
2.2+ does."""

from __future__ import annotations

import functools
import subprocess
from typing import Any, Dict, Tuple

from ..errors import PatchDeclinedError
from ..log import logger
from ..runtime import agent
from ._common import PROCESSES, Check, replace, verified

CHECKS = (
    Check(
        PROCESSES,
        "SubprocessHandler._popen",
        (("self", "args", "env"),),
    ),
)

#: The names torch's ``_popen`` uses before 2.2: ``subprocess.Popen(args=args, env=env,
#: stdout=self._stdout, stderr=self._stderr)`` and nothing else (1.13-2.1, all fingerprinted).
PLAIN_POPEN = ("subprocess", "Popen", "_stdout", "_stderr")


def install(kill_orphans: bool, new_session: bool) -> None:
    """Wrap torch's ``SubprocessHandler._popen`` (the same class in every module that names
    it)."""
    [(owner, attr, original)] = verified(CHECKS)
    names = tuple(getattr(getattr(original, "__code__", None), "co_names", ()))
    if new_session and names != PLAIN_POPEN:
        raise PatchDeclinedError(
            f"SubprocessHandler._popen uses {', '.join(names) or 'nothing'}, expected"
            f" {', '.join(PLAIN_POPEN)} (torch before 2.2)"
        )
    runtime = agent.runtime()
    workers, orphans = runtime.workers, runtime.orphans
    if kill_orphans:
        problem = orphans.start()
        if problem is not None:
            logger.warning("torchrun_jsc: workers may outlive a killed agent: %s", problem)

    @functools.wraps(original)
    def _popen(self: Any, args: Tuple[str, ...], env: Dict[str, str]) -> Any:
        workers.starting(args)
        if new_session:  # what torch 2.2+ does: the worker leads a session of its own
            proc = subprocess.Popen(
                args=args,
                env=env,
                stdout=self._stdout,
                stderr=self._stderr,
                start_new_session=True,
            )
        else:
            proc = original(self, args, env)
        workers.register(proc)
        if kill_orphans:
            orphans.tell(proc.pid)
        return proc

    replace(owner, attr, _popen)
