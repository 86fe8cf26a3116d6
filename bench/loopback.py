"""What the store benchmarks share: a torch TCPStore server in a process of its own on loopback,
the open-file limit raised for many clients, and a network namespace of their own."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

SERVER = """
import datetime, sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=float(sys.argv[2])))
print(store.port, flush=True)
time.sleep(float(sys.argv[1]))
"""


def start_server(lives: float, timeout: float = 60.0) -> tuple[subprocess.Popen[str], int]:
    """The store server's process (ends after ``lives`` seconds; its store's timeout
    ``timeout`` seconds) and its port."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(lives), str(timeout)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    return server, int(server.stdout.readline())


def raise_open_files() -> None:
    """The soft limit of open files up to the hard one (a client per simulated node)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def isolate(name: str) -> None:
    """Re-run this script in its own network namespace (loopback only), once: torch's TCPStore
    looks up the peer's name for every connection, and a slow resolver would be measured."""
    if os.environ.get("TRJSC_BENCH_NETNS") == "1":
        return
    if os.geteuid() != 0:
        raise SystemExit(f"{name} needs root (it runs in its own network namespace)")
    os.environ["TRJSC_BENCH_NETNS"] = "1"
    script = 'ip link set lo up && exec "$@"'
    os.execvp("unshare", ["unshare", "-n", "sh", "-c", script, "sh", sys.executable, *sys.argv])
