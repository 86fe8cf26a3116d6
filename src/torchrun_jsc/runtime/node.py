"""What the plan knows about this node, for the agent-side mechanisms (no imports: the plan
builds it, the runtime uses it)."""

from __future__ import annotations

from typing import NamedTuple, Optional


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
    grace: Optional[float] = None
