"""All versions: going on after a lost node (``--max_restarts`` > 0). The job watch restarts
the job without a lost member while restarts are left and the live members and the waiting
spares make up ``--nnodes``' minimum; agents beyond the maximum wait as spares and end with the
job; every restart is said once on every node (:mod:`torchrun_jsc.runtime.session`; its
settings are the ``job_watch`` patch's).

torch's ``launch_agent`` closes the rendezvous whenever an agent ends, for every node: a node
that is out of the job (it was frozen and thawed, or cut off from the store) must not end the
round that went on without it, so its close is skipped; every other close stays."""

from __future__ import annotations

import functools
from typing import Any

from ..runtime import agent
from . import _agent_hooks
from ._common import DYNAMIC_RENDEZVOUS, Check, replace, verified

CHECKS = (
    *_agent_hooks.CHECKS,
    Check(DYNAMIC_RENDEZVOUS, "DynamicRendezvousHandler.shutdown", (("self",),)),
)


def install() -> None:
    """Keep the rendezvous open when this node is out of the job."""
    owner, attr, shutdown = verified(CHECKS)[-1]
    runtime = agent.runtime()

    @functools.wraps(shutdown)
    def _shutdown(self: Any) -> Any:
        session = runtime.session
        if session is not None and not session.may_close():
            return False  # torch's own answer for a close that did not happen
        return shutdown(self)

    replace(owner, attr, _shutdown)
