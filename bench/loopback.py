"""What the store benchmarks share: a torch TCPStore server in a process of its own on loopback,
the simulated nodes' client processes, the open-file limit raised for many clients, and a
network namespace of their own."""

from __future__ import annotations

import inspect
import os
import resource
import subprocess
import sys
from typing import Any, Dict

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


def start_clients(
    script: str, role: str, port: int, nodes: int, processes: int, *extra: object
) -> list[subprocess.Popen[str]]:
    """``nodes`` simulated nodes spread over at most ``processes`` client processes, each
    ``script role port first count *extra``, started and ready (each prints ``ready`` first)."""
    per = -(-nodes // processes)
    children = []
    for p in range(processes):
        first, count = p * per, min(per, nodes - p * per)
        if count <= 0:
            break
        argv = [sys.executable, script, role, *map(str, (port, first, count, *extra))]
        children.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return children


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


def loopback_addr(from_backend: Any) -> Dict[str, Any]:
    """``local_addr="127.0.0.1"`` for torch's ``DynamicRendezvousHandler.from_backend`` where it
    takes one (torch 2.0 and later); nothing before, where the node's address is its FQDN."""
    if "local_addr" in inspect.signature(from_backend).parameters:
        return {"local_addr": "127.0.0.1"}
    return {}
