"""The two places in torch's agent where the job watch
(:class:`~torchrun_jsc.runtime.session.adapter.Session`, the process's runtime's) hooks in,
installed once by the ``job_watch`` patch; the patches that reach the watch later check the
same internals."""

from __future__ import annotations

import functools
from typing import Any

from ..runtime import agent
from ._common import AGENT, LOCAL_AGENT, Check, replace, verified

CHECKS = (
    Check(AGENT, "SimpleElasticAgent._rendezvous", (("self", "worker_group"),)),
    Check(LOCAL_AGENT, "LocalElasticAgent._monitor_workers", (("self", "worker_group"),)),
)
_MARK = "__torchrun_jsc_hook__"


def install() -> None:
    """Hook the runtime's session into ``_rendezvous`` and ``_monitor_workers`` (once per
    process; a runtime without one leaves torch's calls as they are)."""
    (r_owner, r_attr, rendezvous), (m_owner, m_attr, monitor) = verified(CHECKS)
    if getattr(rendezvous, _MARK, False):
        return

    @functools.wraps(rendezvous)
    def _rendezvous(self: Any, worker_group: Any) -> Any:
        session = agent.runtime().session
        if session is None:
            return rendezvous(self, worker_group)
        session.before_rendezvous(self, worker_group)
        try:
            result = rendezvous(self, worker_group)
        except Exception as error:
            session.rendezvous_failed(error)
            raise
        session.after_rendezvous(self, worker_group)
        return result

    @functools.wraps(monitor)
    def _monitor_workers(self: Any, worker_group: Any) -> Any:
        session = agent.runtime().session
        if session is None:
            return monitor(self, worker_group)
        return session.around_monitor(self, worker_group, monitor)

    setattr(_rendezvous, _MARK, True)
    replace(r_owner, r_attr, _rendezvous)
    replace(m_owner, m_attr, _monitor_workers)
