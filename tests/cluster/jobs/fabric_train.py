"""Cluster workload through Lightning Fabric: one DDP step of a tiny model on the CPU and one
``fabric.all_reduce``, then the ``TRJSC_RESULT`` line of jobs/train.py. Fabric reads the launch
from torch's elastic environment (``fabric run`` or any torchrun-based launcher)."""

import os
import socket
import sys


def main() -> int:
    import torch
    from lightning.fabric import Fabric

    nodes = int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    fabric = Fabric(
        accelerator="cpu",
        strategy="ddp",
        devices=int(os.environ["LOCAL_WORLD_SIZE"]),
        num_nodes=nodes,
    )
    if not os.environ.get("LT_CLI_USED"):  # under ``fabric run`` the processes are set up
        fabric.launch()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loss = model(torch.ones(2, 4)).sum()
    fabric.backward(loss)
    optimizer.step()
    rank, world = fabric.global_rank, fabric.world_size
    got = int(fabric.all_reduce(torch.tensor([float(rank + 1)]), reduce_op="sum").item())
    expect = world * (world + 1) // 2
    env = os.environ.get
    os.write(
        1,
        (
            f"TRJSC_RESULT host={socket.gethostname()} rank={rank} world={world} "
            f"local_rank={env('LOCAL_RANK')} group_rank={env('GROUP_RANK')} "
            f"allreduce={got} expect={expect} master_addr={env('MASTER_ADDR')} "
            f"master_port={env('MASTER_PORT')} restarts={env('TORCHELASTIC_RESTART_COUNT')}\n"
        ).encode(),
    )
    return 0 if got == expect else 1


if __name__ == "__main__":
    sys.exit(main())
