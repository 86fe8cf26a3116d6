"""Timestamps of a launch's phases, for bench/cluster_phases.py: runs one agent or one worker
in this process and writes when each phase ended (wall clock, ``time.time()``, which every
namespace of the test cluster shares) to a file of its own in ``$TRJSC_BENCH_PHASES``.

    python phase_probe.py agent torchrun_jsc|torch.distributed.run [launcher args]
    python phase_probe.py worker train.py [args]

An agent runs the launcher's own entry point (``torchrun_jsc.cli.main`` or
``torch.distributed.run.main``, what the ``torchrun_jsc`` and ``torchrun`` commands call) with the
given arguments. The timing wrappers go around torch's agent methods only once torch's main is
about to run, that is after torchrun_jsc has installed its patches, so they never take part in a
patch's checks. Each stamp is one short append to a file; nothing else changes. Without
``TRJSC_BENCH_PHASES`` nothing is written.
"""

from __future__ import annotations

import time

T0 = time.time()

import atexit  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

ENV = "TRJSC_BENCH_PHASES"


def stamp(role: str, event: str, value: Optional[float] = None) -> None:
    """Append ``event value cpu`` to this process's file: ``value`` (default: now) and this
    process's CPU seconds so far (all its threads)."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    cpu = time.process_time()
    line = f"{event} {time.time() if value is None else value:.6f} {cpu:.6f}\n"
    name = f"{folder}/{os.uname().nodename}-{role}-{os.getpid()}.txt"
    fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def cpu_stamps(role: str) -> None:
    """This process's CPU seconds (user + system), and its reaped children's."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    stamp(role, "cpu_self", me.ru_utime + me.ru_stime)
    stamp(role, "cpu_children", kids.ru_utime + kids.ru_stime)


def _after(owner: Any, attr: str, event: str) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        stamp("agent", event)
        return result

    setattr(owner, attr, wrapper)


def _before(owner: Any, attr: str, event: str) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp("agent", event)
        return original(*args, **kwargs)

    setattr(owner, attr, wrapper)


def _around(owner: Any, attr: str, before: str, after: str) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp("agent", before)
        try:
            return original(*args, **kwargs)
        finally:
            stamp("agent", after)

    setattr(owner, attr, wrapper)


def _watch_monitor(owner: Any) -> None:
    """Stamp the first look of torch's monitor that finds the workers ended."""
    from torch.distributed.elastic.agent.server.api import WorkerState

    original, seen = owner._monitor_workers, []  # type: Any, list[bool]

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not seen and result.state in (WorkerState.SUCCEEDED, WorkerState.FAILED):
            seen.append(True)
            stamp("agent", "workers_ended")
        return result

    owner._monitor_workers = wrapper


def time_torch_main(main: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap torch's agent methods, then run ``main``; stamps its start and its return."""
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
    from torch.distributed.launcher import api as launcher

    @functools.wraps(main)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _around(launcher, "launch_agent", "launch_agent", "launch_agent_done")
        _around(api.SimpleElasticAgent, "run", "agent_run", "agent_run_done")
        _after(DynamicRendezvousHandler, "next_rendezvous", "rdzv_joined")
        _after(api.SimpleElasticAgent, "_rendezvous", "rdzv_done")
        if "torchrun_jsc.runtime.session.adapter" in sys.modules:  # its hook's part of _rendezvous
            from torchrun_jsc.runtime.session.adapter import Session

            _before(Session, "after_rendezvous", "ranks_assigned")
        _after(LocalElasticAgent, "_start_workers", "workers_started")
        _watch_monitor(LocalElasticAgent)
        _after(api.SimpleElasticAgent, "_exit_barrier", "barrier_done")
        # runs before every handler registered so far (atexit runs the last one first)
        atexit.register(stamp, "agent", "atexit_begin")
        stamp("agent", "torch_main")
        try:
            return main(*args, **kwargs)
        finally:
            stamp("agent", "main_returned")

    return wrapper


def run_agent(launcher: str, args: list[str]) -> None:
    atexit.register(cpu_stamps, "agent")  # registered first: runs last
    atexit.register(stamp, "agent", "atexit_end")
    sys.argv = [launcher, *args]
    if launcher == "torchrun_jsc":
        from torchrun_jsc import apply, cli

        prepare, carry_out = apply.prepare, apply.carry_out

        def timed_prepare(*a: Any, **k: Any) -> Any:
            stamp("agent", "torch_imported")  # cli imports torch just before
            try:
                return prepare(*a, **k)
            finally:
                stamp("agent", "planned")

        def timed_carry_out(*a: Any, **k: Any) -> Any:
            try:
                return carry_out(*a, **k)
            finally:
                stamp("agent", "patched")
                from torch.distributed import run

                run.main = time_torch_main(run.main)  # cli calls run.main next

        apply.prepare, apply.carry_out = timed_prepare, timed_carry_out
        cli.main(args)
    elif launcher == "torch.distributed.run":
        import torch  # noqa: F401

        stamp("agent", "torch_imported")
        from torch.distributed import run

        stamp("agent", "planned")
        stamp("agent", "patched")
        time_torch_main(run.main)(args)
    else:
        raise SystemExit(f"phase_probe: unknown launcher {launcher!r}")


class _ResultWatch:
    """stdout, stamping the first write that carries a ``TRJSC_RESULT`` line."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._seen = stream, False

    def write(self, text: str) -> int:
        if not self._seen and "TRJSC_RESULT" in text:
            self._seen = True
            stamp("worker", "result")
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def run_worker(script: str, args: list[str]) -> None:
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.stdout = _ResultWatch(sys.stdout)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        stamp("worker", "worker_end")
        cpu_stamps("worker")


def main() -> None:
    role, target, *rest = sys.argv[1:]
    stamp(role, "py_start", T0)
    if role == "agent":
        run_agent(target, rest)
    elif role == "worker":
        run_worker(target, rest)
    else:
        raise SystemExit(f"phase_probe: unknown role {role!r} (agent or worker)")


if __name__ == "__main__":
    main()
