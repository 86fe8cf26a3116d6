"""What every patch needs: finding a torch internal, checking its signature, undoing patches
(:func:`restore_all`; a forked child undoes them at once, see :func:`_after_fork_in_child`)."""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any, Callable, Iterable, List, NamedTuple, Sequence, Tuple, Union

from ..errors import PatchDeclinedError

#: The torch modules more than one patch reaches into, spelled once.
DYNAMIC_RENDEZVOUS = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
AGENT = "torch.distributed.elastic.agent.server.api"
LOCAL_AGENT = "torch.distributed.elastic.agent.server.local_elastic_agent"
PROCESSES = "torch.distributed.elastic.multiprocessing.api"
C10D_BACKEND = "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend"


class _Undo(NamedTuple):
    """One thing :func:`restore_all` undoes: an attribute's old value ``(owner, attribute,
    value)``, or a callable."""

    what: Union[Tuple[object, str, Any], Callable[[], None]]
    #: It ends a thread or process of the installing process: a forked child, which has
    #: neither, skips it.
    ends_own: bool


_UNDO: List[_Undo] = []


class Check(NamedTuple):
    """A torch internal a patch relies on: ``module``, ``target`` (a qualified name) and the
    parameter lists it accepts. ``scripts/torch-matrix fingerprints`` records every one."""

    module: str
    target: str
    accepted: Tuple[Tuple[str, ...], ...]


def verified(checks: Sequence[Check]) -> List[Tuple[object, str, Any]]:
    """``(owner, attribute, value)`` of every check, after checking all of them; raises
    :class:`PatchDeclinedError` naming the first internal that is missing or differs."""
    found = [find(c.module, c.target) for c in checks]
    for check, (_, _, value) in zip(checks, found):
        expect(f"{check.module}.{check.target}", value, check.accepted)
    return found


def find(module: str, qualname: str) -> Tuple[object, str, Any]:
    """``(owner, attribute, value)`` of ``module:qualname``; PatchDeclinedError if missing."""
    try:
        owner: object = importlib.import_module(module)
    except ImportError as exc:
        raise PatchDeclinedError(f"{module} cannot be imported ({exc})") from None
    *path, attr = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise PatchDeclinedError(f"{module}.{qualname} does not exist in this torch")
    if not hasattr(owner, attr):
        raise PatchDeclinedError(f"{module}.{qualname} does not exist in this torch")
    raw = inspect.getattr_static(owner, attr)
    return owner, attr, raw


def parameters(func: Any) -> Tuple[str, ...]:
    """Parameter names of ``func`` (a function, staticmethod or classmethod object)."""
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    return tuple(inspect.signature(func).parameters)


def expect(where: str, func: Any, accepted: Iterable[Sequence[str]]) -> Tuple[str, ...]:
    """Check that ``func`` has one of the ``accepted`` parameter lists; return the one it has."""
    found = parameters(func)
    options = [tuple(a) for a in accepted]
    if found not in options:
        shown = " or ".join("(" + ", ".join(o) + ")" for o in options)
        raise PatchDeclinedError(f"{where} has parameters ({', '.join(found)}); expected {shown}")
    return found


def replace(owner: object, attr: str, value: Any) -> None:
    """Set ``owner.attr = value``, remembering the old value for :func:`restore_all`."""
    _UNDO.append(_Undo((owner, attr, inspect.getattr_static(owner, attr)), ends_own=False))
    setattr(owner, attr, value)


def on_restore(undo: Callable[[], None], ends_own: bool = False) -> None:
    """Run ``undo`` in :func:`restore_all` (for what is not an attribute: signal handlers,
    exit hooks); ``ends_own``: it ends a thread or process this process started, which a
    forked child does not run."""
    _UNDO.append(_Undo(undo, ends_own))


def installed() -> bool:
    """Whether any patch is installed in this process."""
    return bool(_UNDO)


def restore_all() -> None:
    """Undo every patch installed in this process (newest first), then drop the runtime they
    shared (:func:`torchrun_jsc.runtime.agent.forget`: its orphan watcher ends, killing the
    workers it was told of, and its registry and stop signals start afresh)."""
    from ..runtime import agent  # here: not every user of the patch mechanism needs it

    _undo(in_child=False)
    agent.forget()


def _undo(in_child: bool) -> None:
    while _UNDO:
        entry = _UNDO.pop()
        if in_child and entry.ends_own:
            continue
        if callable(entry.what):
            entry.what()
        else:
            owner, attr, value = entry.what
            setattr(owner, attr, value)


def _after_fork_in_child() -> None:
    """A forked child (a second agent forked after a launch, a worker torch forks, a command
    started with a ``preexec_fn``) starts from plain torch: the patches and signal handlers come
    off (attributes set, handlers put back, no lock taken), and the parent's runtime is dropped
    without touching the parent's threads and processes (the child has none of them)."""
    if not _UNDO:
        return
    from ..runtime import agent

    _undo(in_child=True)
    agent.drop_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)
