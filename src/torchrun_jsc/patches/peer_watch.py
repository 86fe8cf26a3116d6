"""All versions: lost nodes. Heartbeats through the rendezvous store; a node not heard from
for the peer timeout, or a rendezvous host that stops answering, stops the job within about a
minute, naming the node (:mod:`torchrun_jsc.runtime.session`)."""

from __future__ import annotations

from typing import Any

from ..runtime import session
from . import _agent_hooks

CHECKS = _agent_hooks.CHECKS


def install(timeout: float, **node: Any) -> None:
    """Watch the other nodes (``node``: :class:`~torchrun_jsc.runtime.session.Node` fields)."""
    _agent_hooks.install()
    _agent_hooks.configure(session.Node(**node), peer_timeout=timeout)
