"""Cluster workload: gloo process group, one all_reduce, one ``TRJSC_RESULT`` line per rank.

Env knobs:
  TRJSC_PG_TIMEOUT       init_process_group timeout in seconds (default 60)
  TRJSC_CRASH_ONCE_FILE  if set and the file does not exist yet, the first process to create
                         it exits 1 before initialising (for restart/fault scenarios)
  TRJSC_TRAIN_SECONDS    after the checked all_reduce, keep all-reducing for this long
                         (prints one TRJSC_TRAINING line first; for kill scenarios)
  TRJSC_FAIL_RANK        this global rank exits with TRJSC_FAIL_CODE (default 3) one second
                         into training (for the first-failure report)
  TRJSC_FAIL_AT_END      seconds: TRJSC_FAIL_RANK trains to the end with the others, waits this
                         long (the others' workers have exited by then), then exits with its
                         code (every other rank succeeds)
  TRJSC_SIGNALS          1: print one TRJSC_SIGNAL line per SIGUSR1/SIGUSR2 received, and go on
Exit status is non-zero when the all_reduce result is wrong.
"""

import datetime
import os
import signal
import socket
import sys
import time


def _note_signal(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    os.write(
        1,
        f"TRJSC_SIGNAL host={socket.gethostname()} rank={os.environ.get('RANK')} "
        f"signal={name} pid={os.getpid()}\n".encode(),
    )


def _failing(rank: int) -> int:
    """Say that this rank fails now; its exit code (TRJSC_FAIL_CODE, default 3)."""
    code = int(os.environ.get("TRJSC_FAIL_CODE", "3"))
    print(f"TRJSC_FAILING host={socket.gethostname()} rank={rank} code={code}", flush=True)
    return code


def main() -> int:
    if os.environ.get("TRJSC_SIGNALS") == "1":
        signal.signal(signal.SIGUSR1, _note_signal)
        signal.signal(signal.SIGUSR2, _note_signal)
    crash_file = os.environ.get("TRJSC_CRASH_ONCE_FILE")
    if crash_file:
        try:
            os.close(os.open(crash_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            print(
                f"TRJSC_CRASH host={socket.gethostname()} rank={os.environ.get('RANK')}", flush=True
            )
            return 1

    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=float(os.environ.get("TRJSC_PG_TIMEOUT", "60")))
    t0 = time.monotonic()
    dist.init_process_group("gloo", timeout=timeout)
    t1 = time.monotonic()
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    t2 = time.monotonic()
    got, expect = int(x.item()), world * (world + 1) // 2
    env = os.environ.get
    print(
        f"TRJSC_RESULT host={socket.gethostname()} rank={rank} world={world} "
        f"local_rank={env('LOCAL_RANK')} group_rank={env('GROUP_RANK')} "
        f"allreduce={got} expect={expect} master_addr={env('MASTER_ADDR')} "
        f"master_port={env('MASTER_PORT')} restarts={env('TORCHELASTIC_RESTART_COUNT')} "
        f"init_s={t1 - t0:.2f} allreduce_s={t2 - t1:.3f}",
        flush=True,
    )
    train_for = float(os.environ.get("TRJSC_TRAIN_SECONDS", "0"))
    fails = os.environ.get("TRJSC_FAIL_RANK") == str(rank)
    at_end = os.environ.get("TRJSC_FAIL_AT_END")
    if train_for > 0:
        print(f"TRJSC_TRAINING host={socket.gethostname()} rank={rank}", flush=True)
        started = time.monotonic()
        while True:
            if fails and not at_end and time.monotonic() > started + 1:
                os._exit(_failing(rank))
            # every rank goes on while any has time left: all run the same number of
            # all_reduces (each deciding by its own clock, one could leave a step early and
            # close its connections under the others' last all_reduce)
            going = torch.tensor([float(time.monotonic() < started + train_for)])
            dist.all_reduce(going, op=dist.ReduceOp.MAX)
            if not going.item():
                break
            time.sleep(0.05)
    dist.destroy_process_group()
    if fails and at_end:
        time.sleep(float(at_end))
        return _failing(rank)
    return 0 if got == expect else 1


if __name__ == "__main__":
    sys.exit(main())
