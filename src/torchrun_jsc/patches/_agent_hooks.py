"""The two places in torch's agent where the job watch (:mod:`torchrun_jsc.runtime.session.adapter`)
hooks in, shared by the ``peer_watch`` and ``failure_report`` patches and installed once."""

from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

from ..runtime.node import Node
from ..runtime.session import adapter as session
from ._common import AGENT, LOCAL_AGENT, Check, on_restore, replace, verified

CHECKS = (
    Check(AGENT, "SimpleElasticAgent._rendezvous", (("self", "worker_group"),)),
    Check(LOCAL_AGENT, "LocalElasticAgent._monitor_workers", (("self", "worker_group"),)),
)
_MARK = "__torchrun_jsc_hook__"


def install() -> None:
    """Hook the session into ``_rendezvous`` and ``_monitor_workers`` (once per process)."""
    (r_owner, r_attr, rendezvous), (m_owner, m_attr, monitor) = verified(CHECKS)
    if getattr(rendezvous, _MARK, False):
        return

    @functools.wraps(rendezvous)
    def _rendezvous(self: Any, worker_group: Any) -> Any:
        session.SESSION.before_rendezvous(self, worker_group)
        try:
            result = rendezvous(self, worker_group)
        except Exception as error:
            session.SESSION.rendezvous_failed(error)
            raise
        session.SESSION.after_rendezvous(self, worker_group)
        return result

    @functools.wraps(monitor)
    def _monitor_workers(self: Any, worker_group: Any) -> Any:
        return session.SESSION.around_monitor(self, worker_group, monitor)

    setattr(_rendezvous, _MARK, True)
    replace(r_owner, r_attr, _rendezvous)
    replace(m_owner, m_attr, _monitor_workers)


def configure(
    node: Node,
    peer_timeout: float = 0.0,
    report: bool = False,
    recovery: Optional[Tuple[int, int]] = None,
    failover: Optional[session.Failover] = None,
) -> None:
    """Configure this process's job watch; undone (a fresh session) by ``restore_all``."""
    session.SESSION.configure(
        node, peer_timeout=peer_timeout, report=report, recovery=recovery, failover=failover
    )
    on_restore(session.reset)
