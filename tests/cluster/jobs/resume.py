"""Cluster workload that resumes from its checkpoint, as torch's elastic docs ask of a script.

Each step all-reduces ``step * (rank + 1)``; every rank checks the sum against the world size
it runs in and prints one ``TRJSC_STEP`` line. The running total of the steps (``acc``) is the
training state: rank 0 saves it with the step every ``TRJSC_CKPT_EVERY`` steps (atomically), and
a (re)started worker group first loads it, so a run that resumed correctly ends with
``acc == 1 + 2 + ... + TRJSC_STEPS`` (one ``TRJSC_DONE`` line per rank).

Env knobs:
  TRJSC_CKPT          the checkpoint file (shared by all nodes; required)
  TRJSC_STEPS         steps in all (default 80)
  TRJSC_STEP_SECONDS  pause after each step (default 0.25)
  TRJSC_CKPT_EVERY    steps between checkpoints (default 5)
  TRJSC_PG_TIMEOUT    init_process_group timeout in seconds (default 1800, torch's)
  TRJSC_SAVE_ON_USR1  1: SIGUSR1 (Slurm's warning before the time limit) makes every rank
                      stop after the same step (the flag is all-reduced with the step), rank 0
                      save the checkpoint, and every rank print ``TRJSC_SAVED`` and exit 0
Exit status is non-zero when a sum is wrong.
"""

import datetime
import json
import os
import signal
import socket
import sys
import time


def load(path: str) -> "tuple[int, int]":
    """The checkpoint's (step, acc), or (0, 0) without one."""
    try:
        with open(path) as f:
            data = json.load(f)
        return int(data["step"]), int(data["acc"])
    except FileNotFoundError:
        return 0, 0


def save(path: str, step: int, acc: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "acc": acc}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> int:
    import torch
    import torch.distributed as dist

    path = os.environ["TRJSC_CKPT"]
    steps = int(os.environ.get("TRJSC_STEPS", "80"))
    pause = float(os.environ.get("TRJSC_STEP_SECONDS", "0.25"))
    every = int(os.environ.get("TRJSC_CKPT_EVERY", "5"))
    timeout = datetime.timedelta(seconds=float(os.environ.get("TRJSC_PG_TIMEOUT", "1800")))
    print(f"TRJSC_UP pid={os.getpid()}", flush=True)  # torch imported (bench: phases)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    host = socket.gethostname()
    start = torch.tensor(list(load(path)) if rank == 0 else [0, 0], dtype=torch.int64)
    dist.broadcast(start, 0)  # every rank resumes from what rank 0 read
    step, acc = int(start[0]), int(start[1])
    print(
        f"TRJSC_RESUMED host={host} rank={rank} world={world} from={step} "
        f"restarts={os.environ.get('TORCHELASTIC_RESTART_COUNT')}",
        flush=True,
    )
    print(f"TRJSC_TRAINING host={host} rank={rank}", flush=True)
    warned = []
    if os.environ.get("TRJSC_SAVE_ON_USR1") == "1":
        signal.signal(signal.SIGUSR1, lambda signum, frame: warned.append(signum))
    wrong = 0
    while step < steps:
        step += 1
        x = torch.tensor([step * (rank + 1), len(warned)], dtype=torch.int64)
        dist.all_reduce(x)
        expect = step * world * (world + 1) // 2
        got = int(x[0].item())
        wrong += got != expect
        acc += got * 2 // (world * (world + 1))
        print(
            f"TRJSC_STEP host={host} rank={rank} world={world} step={step} sum={got} "
            f"expect={expect}",
            flush=True,
        )
        if int(x[1].item()):
            if rank == 0:
                save(path, step, acc)
            print(f"TRJSC_SAVED host={host} rank={rank} step={step}", flush=True)
            dist.destroy_process_group()
            return 1 if wrong else 0
        if rank == 0 and step % every == 0:
            save(path, step, acc)
        time.sleep(pause)
    print(
        f"TRJSC_DONE host={host} rank={rank} world={world} acc={acc} "
        f"expect={steps * (steps + 1) // 2}",
        flush=True,
    )
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
