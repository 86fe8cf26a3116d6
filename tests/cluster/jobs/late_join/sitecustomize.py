"""Test fault, for the agent of one node: its first rendezvous join starts ``TRJSC_LATE_JOIN``
seconds late. On the rendezvous host this is a host that came last to the first round: its
store is up (made before the join), the other nodes join first. Scenarios put this directory
on that node's ``PYTHONPATH``; the variable is taken out of the environment at once, so the
workers and an agent started again (a handover) run as usual. torch's module is patched when
torch imports it, not before (the agent's own start is unchanged)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from types import ModuleType
from typing import Any, Optional, Sequence

_MODULE = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
_DELAY = os.environ.pop("TRJSC_LATE_JOIN", "")


def _late(module: ModuleType, seconds: float) -> None:
    handler = module.DynamicRendezvousHandler
    original = handler.next_rendezvous
    first = [True]

    def next_rendezvous(self: Any) -> Any:
        if first[0]:
            first[0] = False
            sys.stderr.write(f"TRJSC_LATE_JOIN joining {seconds:g} s late\n")
            sys.stderr.flush()
            time.sleep(seconds)
        return original(self)

    next_rendezvous.__wrapped__ = original  # type: ignore[attr-defined]
    handler.next_rendezvous = next_rendezvous


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _late(module, float(_DELAY))

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _DELAY:
    sys.meta_path.insert(0, _Finder())
