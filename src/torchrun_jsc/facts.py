"""Facts about this node that the plan needs, gathered in one place.

:class:`NodeFacts` is plain data; :func:`gather` is the only function that looks at the machine.
Tests build :class:`NodeFacts` by hand to describe any cluster layout.
"""

from __future__ import annotations

import os
import socket
import time
from types import MappingProxyType
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

from . import network
from .network import Interface
from .torch_cli import TorchCli

#: The default of :attr:`NodeFacts.route_sources` (read-only).
_NO_ROUTES: Mapping[str, Optional[str]] = MappingProxyType({})


class NodeFacts(NamedTuple):
    """What this node looks like from the launcher's point of view."""

    hostname: str = ""
    interfaces: Tuple[Interface, ...] = ()
    #: The rendezvous endpoint host these facts were gathered for (None: none needed).
    endpoint_host: Optional[str] = None
    #: The endpoint's addresses, in resolver order.
    endpoint_addresses: Tuple[str, ...] = ()
    #: Why the endpoint did not resolve (None when it did, or when nothing was looked up).
    resolve_error: Optional[str] = None
    #: Endpoint address -> this node's source address towards it (None: no route).
    route_sources: Mapping[str, Optional[str]] = _NO_ROUTES
    #: Endpoint addresses that belong to this node.
    local_endpoint_addresses: Tuple[str, ...] = ()
    python_version: Tuple[int, int] = (3, 11)
    #: ``sys.platform``.
    platform: str = "linux"
    #: Seconds since this node's Slurm step started (its step daemon, an ancestor of this
    #: process, was created); None outside Slurm or when it cannot be found.
    step_age: Optional[float] = None
    #: CPUs this process may run on (its affinity mask), None when unknown.
    cpus: Optional[int] = None
    #: ``net.core.somaxconn`` of this node's network namespace (caps every listen backlog).
    somaxconn: Optional[int] = None
    #: The soft limit on open files (``ulimit -n``).
    open_files: Optional[int] = None
    #: ``--nproc_per_node`` given as a word (``gpu``, ``auto``): the worker count torch makes of
    #: it on this node, or torch's reason for refusing it (``Cuda is not available.``).
    local_world_size: Optional[int] = None
    local_world_size_error: Optional[str] = None
    #: ``--local_addr`` given by the user: its addresses, why it does not resolve, and those of
    #: its addresses that belong to this node.
    local_addr_addresses: Tuple[str, ...] = ()
    local_addr_error: Optional[str] = None
    local_addr_own: Tuple[str, ...] = ()
    #: Why python cannot run the training script here (``does not exist``; None: it can, or
    #: the script is a module or a program), and why torch cannot use ``--log_dir`` here.
    script_problem: Optional[str] = None
    #: Whether ``TORCHRUN_JSC_EVENTS`` names a folder that exists here.
    events_folder: bool = False
    log_dir_problem: Optional[str] = None
    #: With ``--numa-binding``: whether ``numactl`` is on this node's PATH (None: not looked).
    numactl: Optional[bool] = None
    #: Seconds spent gathering (for explain and the benchmark).
    seconds: float = 0.0

    def interface_of(self, address: str) -> Optional[str]:
        """The interface that carries ``address``."""
        for iface in self.interfaces:
            if iface.address == address:
                return iface.name
        return None


def gather(
    endpoint_host: Optional[str],
    resolve_timeout: float,
    local_addr: Optional[str] = None,
    nproc_word: Optional[str] = None,
    cli: Optional[TorchCli] = None,
    script: Optional[str] = None,
    log_dir: Optional[str] = None,
    numa: bool = False,
    events: Optional[str] = None,
) -> NodeFacts:
    """Look at this machine: hostname, interfaces and, if given, the endpoint's reachability,
    what ``--local_addr`` names (one look-up, no retry), what torch makes of a
    ``--nproc_per_node`` word here (it asks the devices), whether the training script and
    ``--log_dir`` can be used here, (``numa``) whether numactl is on the PATH, and whether
    ``events`` (``TORCHRUN_JSC_EVENTS``) is a folder."""
    import shutil
    import sys

    started = time.monotonic()
    hostname = socket.gethostname()
    ifaces = tuple(network.interfaces())
    addresses: Tuple[str, ...] = ()
    error: Optional[str] = None
    routes: Dict[str, Optional[str]] = {}
    local: Tuple[str, ...] = ()
    if endpoint_host is not None:
        try:
            addresses = tuple(
                network.resolve(
                    endpoint_host, resolve_timeout, retrying=lambda: _retrying(endpoint_host)
                )
            )
        except OSError as exc:
            error = exc.strerror or str(exc)
        routes = {a: network.route_source(a) for a in addresses}
        local = tuple(a for a in addresses if network.is_local_address(a))
    workers, refused = (None, None)
    if nproc_word is not None:
        workers, refused = (cli or TorchCli()).local_world_size(nproc_word)
    given, given_error = _look_up_once(local_addr) if local_addr is not None else ((), None)
    return NodeFacts(
        hostname=hostname,
        interfaces=ifaces,
        endpoint_host=endpoint_host,
        endpoint_addresses=addresses,
        resolve_error=error,
        route_sources=routes,
        local_endpoint_addresses=local,
        python_version=(sys.version_info[0], sys.version_info[1]),
        platform=sys.platform,
        step_age=step_age(),
        cpus=_cpus(),
        somaxconn=read_somaxconn(),
        open_files=_open_files(),
        local_world_size=workers,
        local_world_size_error=refused,
        local_addr_addresses=given,
        local_addr_error=given_error,
        local_addr_own=tuple(a for a in given if network.is_local_address(a)),
        script_problem=script_problem(script) if script is not None else None,
        log_dir_problem=log_dir_problem(log_dir) if log_dir is not None else None,
        events_folder=bool(events) and os.path.isdir(events or ""),
        numactl=shutil.which("numactl") is not None if numa else None,
        seconds=time.monotonic() - started,
    )


def script_problem(path: str) -> Optional[str]:
    """Why ``python path`` cannot run here: the path does not exist, or it is a directory
    without ``__main__.py`` (python runs a directory or a zip file that has one)."""
    import os

    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path) and not any(
        os.path.isfile(os.path.join(path, name)) for name in ("__main__.py", "__main__.pyc")
    ):
        return "is a directory without __main__.py"
    return None


def log_dir_problem(path: str) -> Optional[str]:
    """Why torch cannot use ``path`` as its log directory (it makes a missing one): something
    that is not a directory is there, or in the way (``os.devnull`` is torch's own case)."""
    import os

    if not path or path == os.devnull:
        return None
    if os.path.exists(path):
        return None if os.path.isdir(path) else "is not a directory"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    return None if os.path.isdir(parent) else f"cannot be made: {parent} is not a directory"


def _look_up_once(host: str) -> Tuple[Tuple[str, ...], Optional[str]]:
    """``host``'s addresses (an address literal is its own), or why there are none."""
    problem = network.host_problem(host)
    if problem is not None:
        return (), problem
    try:
        return tuple(network.resolve(host, 0.0)), None
    except OSError as exc:
        return (), exc.strerror or str(exc)


def _retrying(host: str) -> None:
    from .log import logger

    logger.info("torchrun_jsc: %s does not resolve yet; retrying", host)


#: Process names of Slurm's per-step daemon (stock Slurm) and ParaStation's task forwarder
#: (psslurm, on JSC's systems): the nearest such ancestor started with the step on this node.
STEP_DAEMONS = ("slurmstepd", "psidforwarder")


def step_age() -> Optional[float]:
    """Seconds since the nearest Slurm step daemon among this process's ancestors started
    (``/proc``: Linux only)."""
    import os

    from .runtime.processes.orphans import proc_stat

    pid = os.getppid()
    while pid > 1:
        found = proc_stat(pid)
        if found is None:
            return None
        name, fields = found
        if name in STEP_DAEMONS:
            return max(0.0, _since_boot() - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
        pid = int(fields[1])
    return None


def _since_boot() -> float:
    """Seconds since boot, the clock of the start times in ``/proc/<pid>/stat``."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _cpus() -> Optional[int]:
    import os

    getter = getattr(os, "sched_getaffinity", None)
    return len(getter(0)) if getter is not None else None


#: Where the kernel shows ``net.core.somaxconn`` (this network namespace's).
SOMAXCONN = "/proc/sys/net/core/somaxconn"


def read_somaxconn() -> Optional[int]:
    """``net.core.somaxconn``, the cap of every listen backlog (None when unreadable)."""
    return _int_file(SOMAXCONN)


def _int_file(path: str) -> Optional[int]:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _open_files() -> Optional[int]:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)
