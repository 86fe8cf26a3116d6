"""Tiny worker script for `scripts/torch-matrix check`.

Run under torchrun with 2 processes: every rank joins a gloo process group,
all-reduces (rank + 1) and checks that the sum is 1 + 2 + ... + world_size.
Prints one "MATRIX-OK" line per rank; the matrix script counts those lines.
Needs nothing but torch (no numpy, no GPU).
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    if value.item() != expected:
        raise SystemExit(f"rank {rank}: all_reduce gave {value.item()}, expected {expected}")
    dist.barrier()
    print(
        f"MATRIX-OK rank={rank} world={world} torch={torch.__version__} "
        f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
