"""Patches across a fork and a second install: a forked child starts from plain torch, and
``restore_all`` (a second ``apply_fixes``) stops the first job watch's threads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from typing import Any, Dict, Iterator

import pytest

from torchrun_jsc import patches
from torchrun_jsc.patches import params
from torchrun_jsc.runtime import agent
from torchrun_jsc.runtime.watch.vocabulary import Config

api = pytest.importorskip("torch.distributed.elastic.agent.server.api")

CONFIG = Config(
    hostname="node1",
    node_rank=1,
    store_host="node0i",
    store_port=29500,
    run_id="9",
    peer_timeout=12.0,
    report=True,
)


@pytest.fixture(autouse=True)
def undo() -> Iterator[None]:
    yield
    patches.restore_all()


def install() -> None:
    for spec in (params.JobWatch(config=CONFIG), params.ForwardSignals(signals=("SIGUSR2",))):
        assert patches.install(spec) is None, spec


def signals_thread_alive() -> bool:
    return any(t.name == "trjsc-signals" and t.is_alive() for t in threading.enumerate())


def in_child() -> Dict[str, Any]:
    """What a forked child sees of the patches, its signal handler and its runtime."""
    inherited = agent.runtime().session
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            seen = {
                "hooked": hasattr(api.SimpleElasticAgent._rendezvous, "__torchrun_jsc_hook__"),
                "usr2": signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL,
                "session": agent.runtime().session is not None,
                "installed": patches.installed(),
                "closing": inherited is not None and inherited.closing.is_set(),
            }
            os.write(write, json.dumps(seen).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as stream:
        text = stream.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    seen: Dict[str, Any] = json.loads(text)
    return seen


def test_a_forked_child_starts_from_plain_torch_and_the_parent_keeps_its_patches() -> None:
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    install()
    assert signals_thread_alive()
    seen = in_child()
    assert seen == {
        "hooked": False,
        "usr2": True,
        "session": False,
        "installed": False,
        "closing": False,  # the child stops none of the parent's threads: it has none
    }
    # the parent: its patches, handler, job watch and forwarding thread as they were
    assert hasattr(api.SimpleElasticAgent._rendezvous, "__torchrun_jsc_hook__")
    assert signal.getsignal(signal.SIGUSR2) != signal.SIG_DFL
    assert agent.runtime().session is not None
    assert signals_thread_alive()


def test_a_command_started_with_a_preexec_fn_prints_nothing_of_it() -> None:
    """``preexec_fn`` (the requeue's scontrol) runs the at-fork hooks in the child before the
    command: they must neither fail nor write."""
    install()
    done = subprocess.run(
        ["sh", "-c", "echo ok"], preexec_fn=lambda: None, capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def test_a_fork_without_patches_leaves_the_runtime_alone() -> None:
    runtime = agent.runtime()
    assert not patches.installed()
    seen = in_child()
    assert seen["installed"] is False and seen["hooked"] is False
    assert agent.runtime() is runtime


def test_restore_all_stops_the_first_watch_and_a_second_install_starts_afresh() -> None:
    install()
    first = agent.runtime().session
    assert first is not None
    patches.restore_all()
    assert first.closing.is_set(), "the first job watch's threads were told to stop"
    assert not signals_thread_alive()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    install()
    second = agent.runtime().session
    assert second is not None and second is not first
    assert not second.closing.is_set()
    rendezvous = api.SimpleElasticAgent._rendezvous
    assert getattr(rendezvous, "__wrapped__", None) is not None
    inner = rendezvous.__wrapped__
    assert not hasattr(inner, "__torchrun_jsc_hook__"), "hooked once, not twice"
