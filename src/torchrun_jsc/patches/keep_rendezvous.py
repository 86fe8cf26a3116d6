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

from ._common import expect, find, replace

MODULE = "torch.distributed.elastic.agent.server.api"
TARGET = "SimpleElasticAgent._restart_workers"
ACCEPTED = (("self", "worker_group"),)
LOCAL_MODULE = "torch.distributed.elastic.agent.server.local_elastic_agent"
SHUTDOWN = "LocalElasticAgent._shutdown"
SHUTDOWN_ACCEPTED = (("self", "death_sig"),)
STOP = "LocalElasticAgent._stop_workers"
STOP_ACCEPTED = (("self", "worker_group"),)
#: Every internal this patch relies on: (module, qualified name, accepted parameter lists).
CHECKS = (
    (MODULE, TARGET, ACCEPTED),
    (LOCAL_MODULE, STOP, STOP_ACCEPTED),
    (LOCAL_MODULE, SHUTDOWN, SHUTDOWN_ACCEPTED),
)


def install() -> None:
    """Keep the rendezvous open while an agent restarts its workers."""
    found = [find(module, target) for module, target, _ in CHECKS]
    for (module, target, accepted), (_, _, value) in zip(CHECKS, found):
        expect(f"{module}.{target}", value, accepted)
    owner, attr, original = found[0]  # CHECKS[0] is the function replaced here
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
