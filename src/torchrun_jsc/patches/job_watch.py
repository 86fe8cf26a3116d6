"""All versions: the job watch. Heartbeats through the rendezvous store (a node not heard from
for the peer timeout, or a rendezvous host that stops answering, stops the job within about a
minute, naming the node), the job's first failure as every agent's last line, and the part of
the watch the ``recovery``, ``failover`` and ``requeue`` patches use
(:mod:`torchrun_jsc.runtime.session`). The plan builds the settings once; this patch makes
the session with them in this process's runtime and hooks it into torch's agent."""

from __future__ import annotations

from ..runtime import agent
from ..runtime.watch.vocabulary import Config
from . import _agent_hooks
from ._common import verified

CHECKS = _agent_hooks.CHECKS


def install(config: Config) -> None:
    """Start the job watch with ``config`` (failover only where this process can start
    itself again: it was started by the torchrun_jsc command)."""
    verified(CHECKS)
    runtime = agent.runtime()
    config = config._replace(failover=config.failover and runtime.command is not None)
    runtime.watch(config)
    _agent_hooks.install()
