"""What the plan knows about this node, for the agent-side mechanisms (no imports but torch's
defaults: the plan builds it, the runtime uses it)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ..torch_defaults import TERM_GRACE


class Node(NamedTuple):
    """This node (``store_host`` None: no rendezvous store to use, e.g. ``--standalone``: the
    failure report then covers this node only)."""

    hostname: str
    node_rank: Optional[int] = None
    is_host: Optional[bool] = None
    endpoint: str = ""
    store_host: Optional[str] = None
    store_port: int = 0
    run_id: str = ""
    elastic: bool = False
    #: ``--nnodes``' maximum (0: not known).
    max_nodes: int = 0
    grace: Optional[float] = None

    def term_grace(self) -> float:
        """The workers' seconds between SIGTERM and SIGKILL (``grace``, else torch's)."""
        return float(TERM_GRACE if self.grace is None else self.grace)
