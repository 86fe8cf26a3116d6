"""All versions: lost nodes. Heartbeats through the rendezvous store; a node not heard from
for the peer timeout, or a rendezvous host that stops answering, stops the job within about a
minute, naming the node (:mod:`torchrun_jsc.runtime.session.adapter`)."""

from __future__ import annotations

from ..runtime.node import Node
from . import _agent_hooks

CHECKS = _agent_hooks.CHECKS


def install(timeout: float, node: Node) -> None:
    """Watch the other nodes."""
    _agent_hooks.install()
    _agent_hooks.configure(node, peer_timeout=timeout)
