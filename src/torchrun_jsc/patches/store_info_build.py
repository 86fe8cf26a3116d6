"""torch 2.4: group rank 0 publishes ``socket.getfqdn()`` through ``RendezvousStoreInfo.build``
and ignores ``--local_addr``.

Replaced by a ``build(rank, store)`` of our own: rank 0 stores this node's chosen address and a
free port under torch's ``MASTER_ADDR``/``MASTER_PORT`` keys; every rank reads them back.
"""

from __future__ import annotations

from typing import Any

from ._common import Check, replace, verified

CHECKS = (
    Check(
        "torch.distributed.elastic.rendezvous.api",
        "RendezvousStoreInfo.build",
        (("rank", "store"),),
    ),
    Check("torch.distributed.elastic.utils.distributed", "get_free_port", ((),)),
)


def install(address: str) -> None:
    """Make rank 0 publish ``address`` as MASTER_ADDR."""
    (owner, attr, _), (_, _, free_port) = verified(CHECKS)
    info_class: Any = owner
    addr_key = getattr(info_class, "MASTER_ADDR_KEY", "MASTER_ADDR")
    port_key = getattr(info_class, "MASTER_PORT_KEY", "MASTER_PORT")

    def build(rank: int, store: Any) -> Any:
        if rank == 0:
            store.set(addr_key, address.encode("UTF-8"))
            store.set(port_key, str(free_port()).encode("UTF-8"))
        master_addr = store.get(addr_key).decode("UTF-8")
        master_port = int(store.get(port_key).decode("UTF-8"))
        return info_class(master_addr=master_addr, master_port=master_port)

    replace(owner, attr, staticmethod(build))
