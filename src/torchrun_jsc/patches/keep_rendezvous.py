"""torch 2.3: a worker restart closes the rendezvous, so ``--max_restarts`` never works.

``LocalElasticAgent._stop_workers`` calls ``_shutdown``, which in 2.3 also shuts the rendezvous
handler down; the restart that follows then fails with ``RendezvousClosedError`` on every node
(also with ``--standalone``). torch 2.4 stops doing that during restarts. Here the agent's
``_restart_workers`` runs with the handler hidden from ``_shutdown``, so a restart stops and
starts the workers but keeps the rendezvous open; a final stop still shuts it down. The plan
installs it on 2.3 only (see :mod:`torchrun_jsc.versions`).
"""

from __future__ import annotations

from typing import Any, Callable

from ._common import AGENT, LOCAL_AGENT, Check, replace, verified

#: The replaced function first, then the two whose 2.3 behaviour it works around.
CHECKS = (
    Check(AGENT, "SimpleElasticAgent._restart_workers", (("self", "worker_group"),)),
    Check(LOCAL_AGENT, "LocalElasticAgent._stop_workers", (("self", "worker_group"),)),
    Check(LOCAL_AGENT, "LocalElasticAgent._shutdown", (("self", "death_sig"),)),
)


def install() -> None:
    """Keep the rendezvous open while an agent restarts its workers."""
    owner, attr, original = verified(CHECKS)[0]
    restart: Callable[..., Any] = original

    def _restart_workers(self: Any, worker_group: Any) -> Any:
        handler = getattr(self, "_rdzv_handler", None)
        if handler is None:
            return restart(self, worker_group)
        self._rdzv_handler = None  # what _shutdown checks before closing the rendezvous
        try:
            return restart(self, worker_group)
        finally:
            self._rdzv_handler = handler

    _restart_workers.__doc__ = getattr(restart, "__doc__", None)
    replace(owner, attr, _restart_workers)
