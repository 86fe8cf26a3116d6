"""All versions: a node keeps trying to reach the rendezvous host until the rendezvous
``join_timeout`` runs out, not only for ``read_timeout``.

torch connects a non-host node to the store in ``c10d_rendezvous_backend._create_tcp_store``
with the TCPStore timeout ``read_timeout`` (60 s): a host that starts later than that fails the
whole job although the rendezvous would wait ``join_timeout`` (600 s). The replacement waits
until ``wait`` seconds have passed: it first tries a plain TCP connection of its own (closed at
once; refused at once while nothing listens), and hands over to torch's connection only once
the port accepts, so torch's C++ connection retries (each logged with some 40 lines of stack
frames, and holding the interpreter for up to twice the attempt) do not run while the host is
not there. It says that it waits after the first failed try and then every 30 s; once
connected, the store gets the user's ``read_timeout`` back, which keeps its meaning for every
store operation. A port that accepts but whose store never answers (another program on it)
is :func:`.store_answer.answered`'s: said after ``read_timeout``, and the agent ended with one
line when this wait is over. Only a node told ``is_host=0`` waits (a
host that cannot listen fails at once, as before).
"""

from __future__ import annotations

import functools
import socket
import time
from datetime import timedelta
from typing import Any

from ..log import logger
from ..runtime import agent
from ..torch_defaults import RDZV_PORT, READ_TIMEOUT
from ._common import C10D_BACKEND, Check, replace, verified
from .store_answer import answered

CHECKS = (Check(C10D_BACKEND, "_create_tcp_store", (("params",),)),)
#: One connection attempt by torch, once the port accepts (torch retries inside it).
ATTEMPT = 10
#: One try of the port: how long a connection may take to be accepted (seconds).
KNOCK = 3.0
#: How often to say that the node still waits.
SAY_EVERY = 30.0


def install(endpoint: str, wait: float, handed_over: bool = False) -> None:
    """Wait up to ``wait`` seconds for the host at ``endpoint`` (for messages); after a
    handover (``handed_over``) a host that never comes ends this agent with one line."""
    [(owner, attr, original)] = verified(CHECKS)
    early_stop = agent.runtime().early_stop
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    @functools.wraps(original)
    def _create_tcp_store(params: Any) -> Any:
        if params.get_as_bool("is_host", None) is not False:
            return original(params)
        early_stop.doing(f"waiting for the rendezvous host {endpoint}")
        try:
            return _wait(params)
        finally:
            early_stop.doing(None)

    def _wait(params: Any) -> Any:
        config = params.config
        given = config.get("read_timeout")
        read_timeout = params.get_as_int("read_timeout", READ_TIMEOUT)
        host, port = parse_rendezvous_endpoint(params.endpoint, default_port=RDZV_PORT)
        started = time.monotonic()
        said = started - SAY_EVERY  # the first failed attempt is told at once
        while True:
            left = wait - (time.monotonic() - started)
            if left > 0 and not listening(host, port, min(KNOCK, left)):
                if time.monotonic() - said >= SAY_EVERY:
                    said = time.monotonic()
                    _say_waiting(endpoint, said - started, wait)
                time.sleep(min(1.0, max(left, 0.0)))
                continue
            config["read_timeout"] = str(max(1, min(ATTEMPT, int(left))))
            try:
                store = answered(original, params, endpoint, read_timeout, max(left, ATTEMPT))
            except RendezvousConnectionError:
                elapsed = time.monotonic() - started
                if elapsed >= wait and handed_over:
                    _give_up(endpoint, wait)
                if elapsed >= wait:
                    raise
                if time.monotonic() - said >= SAY_EVERY:
                    said = time.monotonic()
                    _say_waiting(endpoint, elapsed, wait)
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


def listening(host: str, port: int, timeout: float) -> bool:
    """Whether something at ``host:port`` accepts a TCP connection within ``timeout`` seconds
    (the connection is closed at once; torch's store takes that silently)."""
    try:
        with socket.create_connection((host, port), timeout=max(timeout, 0.1)):
            return True
    except OSError:
        return False


def _say_waiting(endpoint: str, elapsed: float, wait: float) -> None:
    logger.warning(
        "torchrun_jsc: waiting for the rendezvous host %s since %.0f s, giving up after %.0f s",
        endpoint,
        elapsed,
        wait,
    )


def _give_up(endpoint: str, wait: float) -> None:
    """The next host after a handover never served: lost too. One line, exit 1."""
    from ..runtime.processes.end import exit_now
    from ..runtime.processes.output import say

    say(
        f"torchrun_jsc: cannot go on: the next rendezvous host {endpoint} did not serve within"
        f" {wait:g} s after the handover (lost too, or this node is cut off from it)"
    )
    exit_now(1)
