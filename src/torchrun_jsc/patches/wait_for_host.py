"""All versions: a node keeps trying to reach the rendezvous host until the rendezvous
``join_timeout`` runs out, not only for ``read_timeout``.

torch connects a non-host node to the store in ``c10d_rendezvous_backend._create_tcp_store``
with the TCPStore timeout ``read_timeout`` (60 s): a host that starts later than that fails the
whole job although the rendezvous would wait ``join_timeout`` (600 s). The replacement retries
the connection in short attempts until ``wait`` seconds have passed, saying that it waits after
the first failed attempt and then every 30 s; once connected, the store gets the user's
``read_timeout`` back, which keeps its meaning for every store operation. Only a node told
``is_host=0`` waits (a host that cannot listen fails at once, as before).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from datetime import timedelta
from typing import Any

from ..log import logger
from ..torch_defaults import READ_TIMEOUT
from ._common import Check, replace, verified

_C10D = "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend"
CHECKS = (Check(_C10D, "_create_tcp_store", (("params",),)),)
#: One connection attempt (torch itself retries inside it up to about 1-3 times this).
ATTEMPT = 10
#: How often to say that the node still waits.
SAY_EVERY = 30.0


def install(endpoint: str, wait: float, handed_over: bool = False) -> None:
    """Wait up to ``wait`` seconds for the host at ``endpoint`` (for messages); after a
    handover (``handed_over``) a host that never comes ends this agent with one line."""
    [(owner, attr, original)] = verified(CHECKS)
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

    @functools.wraps(original)
    def _create_tcp_store(params: Any) -> Any:
        if params.get_as_bool("is_host", None) is not False:
            return original(params)
        config = params.config
        given = config.get("read_timeout")
        read_timeout = params.get_as_int("read_timeout", READ_TIMEOUT)
        started = time.monotonic()
        said = started - SAY_EVERY  # the first failed attempt is told at once
        while True:
            left = wait - (time.monotonic() - started)
            config["read_timeout"] = str(max(1, min(ATTEMPT, int(left))))
            try:
                store = original(params)
            except RendezvousConnectionError:
                elapsed = time.monotonic() - started
                if elapsed >= wait and handed_over:
                    _give_up(endpoint, wait)
                if elapsed >= wait:
                    raise
                if time.monotonic() - said >= SAY_EVERY:
                    said = time.monotonic()
                    logger.warning(
                        "torchrun_jsc: waiting for the rendezvous host %s since %.0f s,"
                        " giving up after %.0f s",
                        endpoint,
                        elapsed,
                        wait,
                    )
                time.sleep(1.0)
                continue
            finally:
                if given is None:
                    config.pop("read_timeout", None)
                else:
                    config["read_timeout"] = given
            store.set_timeout(timedelta(seconds=read_timeout))
            return store

    replace(owner, attr, _create_tcp_store)


def _give_up(endpoint: str, wait: float) -> None:
    """The next host after a handover never served: lost too. One line, exit 1."""
    from ..runtime.ledger import say

    say(
        f"torchrun_jsc: cannot go on: the next rendezvous host {endpoint} did not serve within"
        f" {wait:g} s after the handover (lost too, or this node is cut off from it)"
    )
    sys.stdout.flush()
    os._exit(1)
