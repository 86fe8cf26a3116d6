"""A rival writer of torch's rendezvous state, for the ``backoff`` scenario: it rewrites the
state blob of run ``RUN_ID`` as fast as it can with the same content in another pickle
protocol (other bytes, the same state), so the nodes' writes in between lose as if another
node's had come first. Says ``imported`` once torch is loaded (the test starts the launch
then); ends when the round is complete, or after ``SECONDS``; prints how many rewrites won.

Usage: rival.py HOST PORT RUN_ID SECONDS
"""

from __future__ import annotations

import base64
import datetime
import pickle
import sys
import time

import torch.distributed as dist


def main() -> None:
    host, port, run_id, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    end = time.monotonic() + seconds
    print("imported", flush=True)  # torch is loaded: the launch may start
    store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=seconds))
    key = "torch.rendezvous." + run_id  # the c10d backend's key of the state
    store.wait([key])
    rewrites, protocol = 0, 2
    while time.monotonic() < end:
        current = store.get(key)
        try:
            state = pickle.loads(base64.b64decode(current))
        except Exception:  # the backend's placeholder before the first state
            continue
        if state.complete:
            break
        protocol = 4 if protocol == 2 else 2
        again = base64.b64encode(pickle.dumps(state, protocol=protocol))
        if again != current and store.compare_set(key, current, again) == again:
            rewrites += 1
    print(f"rewrites {rewrites}", flush=True)


if __name__ == "__main__":
    main()
