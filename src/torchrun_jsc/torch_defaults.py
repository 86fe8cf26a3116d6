"""torch's own defaults that torchrun_jsc relies on, each with where in torch it comes from.

The same on every supported release (1.9 to 2.15) unless a comment says otherwise; the
settings prose (:mod:`torchrun_jsc.settings.table`) and every message name them from here.
"""

from __future__ import annotations

#: Seconds between SIGTERM and SIGKILL when torch stops its workers: the ``timeout`` default of
#: ``PContext.close`` (``distributed/elastic/multiprocessing/api.py``), which the agent's
#: ``_shutdown`` keeps; ``--shutdown-timeout`` sets it from 2.12.
TERM_GRACE = 30
#: The c10d rendezvous store's timeout for one operation, ``read_timeout``: the default of
#: ``params.get_as_int("read_timeout", ...)`` in ``_create_tcp_store``
#: (``distributed/elastic/rendezvous/c10d_rendezvous_backend.py``).
READ_TIMEOUT = 60
#: How long a node waits for the rendezvous to complete, ``join_timeout``: the ``"join"`` entry
#: of ``RendezvousTimeout``'s defaults (``distributed/elastic/rendezvous/dynamic_rendezvous.py``).
JOIN_TIMEOUT = 600
#: ``last_call_timeout`` and ``close_timeout``: the ``"last_call"`` and ``"close"`` entries of
#: the same defaults.
LAST_CALL_TIMEOUT = 30
CLOSE_TIMEOUT = 30
#: How long an agent whose workers finished waits for the other agents: the
#: ``exit_barrier_timeout`` default of ``SimpleElasticAgent`` and ``LocalElasticAgent``
#: (``distributed/elastic/agent/server/api.py``, ``local_elastic_agent.py``).
EXIT_BARRIER_TIMEOUT = 300
#: Seconds between a node's keep-alives in torch's rendezvous state: ``keep_alive_interval``,
#: the default of ``RendezvousSettings`` (``distributed/elastic/rendezvous/dynamic_rendezvous.py``),
#: read from ``--rdzv_conf`` from torch 2.7.
KEEP_ALIVE_INTERVAL = 5
#: The c10d rendezvous port when ``--rdzv_endpoint`` names none: the ``default_port`` that
#: ``_create_tcp_store`` passes to ``parse_rendezvous_endpoint``
#: (``distributed/elastic/rendezvous/c10d_rendezvous_backend.py``).
RDZV_PORT = 29400
#: The host of a c10d rendezvous without ``--rdzv_endpoint`` (``parse_rendezvous_endpoint`` in
#: ``distributed/elastic/rendezvous/utils.py`` falls back to it for an empty endpoint).
RDZV_HOST = "localhost"
#: The integer rendezvous keys (seconds) and their defaults, as the c10d rendezvous reads them.
RDZV_SECONDS = {
    "join_timeout": JOIN_TIMEOUT,
    "last_call_timeout": LAST_CALL_TIMEOUT,
    "close_timeout": CLOSE_TIMEOUT,
    "read_timeout": READ_TIMEOUT,
}
