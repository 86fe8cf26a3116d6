"""Workload for the loopback integration tests: gloo all_reduce of rank+1, one result line."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expect = world * (world + 1) // 2
# One write per line: two workers share the launcher's stdout, and print() writes the text
# and the newline separately, which can interleave.
sys.stdout.write(
    f"RESULT rank={rank} world={world} allreduce={value.item():g} expect={expect} "
    f"master_addr={os.environ.get('MASTER_ADDR')} "
    f"gloo_ifname={os.environ.get('GLOO_SOCKET_IFNAME')} "
    f"argv={json.dumps(sys.argv[1:], separators=(',', ':'))}\n"
)
sys.stdout.flush()
dist.destroy_process_group()
raise SystemExit(0 if value.item() == expect else 3)
