"""All versions: a rendezvous store that accepts connections and never answers is named after
``read_timeout`` and ends the agent with one line after ``join_timeout``.

Another program on the rendezvous port (a leftover process, a second job's service) accepts
torch's connection and never answers; torch then waits in C++, whatever its timeouts: in the
connection (torch 2.x) or in the first store operation (torch 1.13, which connects without an
answer). The replacement times torch's ``_create_tcp_store`` and the store's first answer (a
count of its keys), with the early stop's signals held off the calling thread meanwhile
(:meth:`~torchrun_jsc.runtime.signals.early_stop.EarlyStop.held`). Calls told ``is_host=0``
are :mod:`.wait_for_host`'s (with its own bound), when it is installed.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from ..log import logger
from ..runtime import agent
from ..torch_defaults import JOIN_TIMEOUT, RDZV_PORT, READ_TIMEOUT
from ._common import C10D_BACKEND, Check, replace, verified

CHECKS = (Check(C10D_BACKEND, "_create_tcp_store", (("params",),)),)


def install(clients: bool = True) -> None:
    """Guard every store creation; ``clients=False``: not those told ``is_host=0``."""
    [(owner, attr, original)] = verified(CHECKS)
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    @functools.wraps(original)
    def _create_tcp_store(params: Any) -> Any:
        if not clients and params.get_as_bool("is_host", None) is False:
            return original(params)
        host, port = parse_rendezvous_endpoint(params.endpoint, default_port=RDZV_PORT)
        silent = params.get_as_int("read_timeout", READ_TIMEOUT)
        bound = params.get_as_int("join_timeout", JOIN_TIMEOUT)
        return answered(original, params, f"{host}:{port}", silent, max(bound, silent))

    replace(owner, attr, _create_tcp_store)


def answered(original: Any, params: Any, endpoint: str, silent: float, bound: float) -> Any:
    """torch's store for ``params`` and its first answer: said after ``silent`` seconds without
    one, and the agent ended after ``bound``."""
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

    started = time.monotonic()
    said = threading.Timer(silent, lambda: _say_silent(endpoint, started, bound))
    ended = threading.Timer(bound, lambda: _end_silent(endpoint, started))
    for timer in (said, ended):
        timer.daemon = True
        timer.start()
    try:
        with agent.runtime().early_stop.held():
            store = original(params)
            try:
                store.num_keys()
            except (RuntimeError, ValueError) as exc:  # torch's errors: the caller's to retry
                raise RendezvousConnectionError(f"the store at {endpoint} did not answer") from exc
        return store
    finally:
        said.cancel()
        ended.cancel()


def _say_silent(endpoint: str, started: float, bound: float) -> None:
    logger.warning(
        "torchrun_jsc: the rendezvous host %s accepts connections but its store has not"
        " answered for %.0f s (another program on that port?); giving up after %.0f s",
        endpoint,
        time.monotonic() - started,
        bound,
    )


def _end_silent(endpoint: str, started: float) -> None:
    from ..runtime.processes.end import exit_now
    from ..runtime.processes.output import say

    say(
        f"torchrun_jsc: cannot start: the rendezvous host {endpoint} accepted connections but"
        f" its store did not answer within {time.monotonic() - started:.0f} s (another program"
        " on that port, or not torch's store); no worker was started"
    )
    exit_now(1)
