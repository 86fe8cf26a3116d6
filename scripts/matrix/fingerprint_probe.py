"""Collect facts about the torch-elastic internals that torchrun_jsc patches.

Run with the Python of one torch install (`scripts/torch-matrix fingerprints`
does that for every matrix venv).  Prints one JSON object on stdout.

Only *facts* are recorded -- whether a target exists, what kind of object it
is, its parameter names/kinds/defaults, dataclass fields, argparse option
strings -- never source code.  A SHA-256 of the source text is included so
that a changed body shows up as a changed fingerprint, but the text itself is
not stored.

Must run on every torch from 1.13 (Python 3.11) onwards, so it sticks to the
standard library plus torch and avoids newer syntax (it must stay Python 3.9-compatible:
annotations are never evaluated, thanks to the ``__future__`` import).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import inspect
import json
import os
import platform
import sys
from typing import Any, Callable, Dict, List, Union

# "module:qualified.name" of objects recorded beyond the patches' own CHECKS: the parser (its
# options and PET_* variables) and torch internals the plan reasons about.
EXTRA_TARGETS = [
    "torch.distributed.elastic.agent.server.api:SimpleElasticAgent._set_master_addr_port",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous:_NodeDesc",
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous:"
    "DynamicRendezvousHandler._create_tcp_store_server",
    "torch.distributed.run:get_args_parser",
]


def targets(src: str) -> List[str]:
    """Every internal some torchrun_jsc patch declares in CHECKS (read from the project source
    at ``src``), then EXTRA_TARGETS: one home for the list, the patch modules."""
    sys.path.insert(0, src)
    from torchrun_jsc import patches

    found = []
    for name in patches.NAMES:
        for check in patches.checks_of(name):
            spec = f"{check.module}:{check.target}"
            if spec not in found:
                found.append(spec)
    return found + [t for t in EXTRA_TARGETS if t not in found]


# Value put into every PET_<DEST> variable to find out which parser actions read
# the environment.  Must parse as int (check_env does bool(int(value))).
ENV_PROBE_VALUE = "7"


def _sha256(obj: Any) -> Union[str, None]:
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _signature(obj: Any) -> Union[List[Dict[str, str]], Dict[str, str]]:
    """Parameters in order: name, kind and repr of the default (if any)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    params = []
    for p in sig.parameters.values():
        entry = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = repr(p.default)
        params.append(entry)
    return params


def _kind(owner: object, name: str, obj: object) -> str:
    """What the attribute is, seen from its owner (class attribute or module global)."""
    if inspect.isclass(owner):
        raw = inspect.getattr_static(owner, name)
        if isinstance(raw, staticmethod):
            return "staticmethod"
        if isinstance(raw, classmethod):
            return "classmethod"
        if isinstance(raw, property):
            return "property"
        if inspect.isfunction(raw):
            return "method"
    if inspect.isclass(obj):
        return "dataclass" if dataclasses.is_dataclass(obj) else "class"
    if inspect.isfunction(obj):
        return "function"
    return type(obj).__name__


def _clean_env() -> None:
    """Drop PET_* so that the caller's environment cannot change parser defaults."""
    for key in list(os.environ):
        if key.startswith("PET_"):
            del os.environ[key]


def _parser_facts(get_args_parser: Callable[[], argparse.ArgumentParser]) -> Dict[str, Any]:
    _clean_env()
    parser = get_args_parser()
    baseline = {id(a): a.default for a in parser._actions}
    dests = [a.dest for a in parser._actions]

    # Build a second parser with PET_<DEST> set for every destination; an action
    # whose default changed reads that variable.
    for dest in dests:
        os.environ["PET_" + dest.upper()] = ENV_PROBE_VALUE
    try:
        probed = {a.dest: a.default for a in get_args_parser()._actions}
    finally:
        _clean_env()

    actions: List[Dict[str, Any]] = []
    for a in parser._actions:
        reads_env = probed.get(a.dest) != baseline[id(a)]
        actions.append(
            {
                "option_strings": list(a.option_strings),
                "dest": a.dest,
                "action_class": type(a).__name__,
                "action_module": type(a).__module__,
                "default": repr(a.default),
                "env": ("PET_" + a.dest.upper()) if reads_env else None,
            }
        )
    return {
        "option_strings": [s for a in parser._actions for s in a.option_strings],
        "actions": actions,
        "env_actions": {"PET_" + a["dest"].upper(): a["action_class"] for a in actions if a["env"]},
    }


def probe(spec: str) -> Dict[str, Any]:
    modname, qualname = spec.split(":")
    facts: Dict[str, Any] = {"module": modname, "qualname": qualname}
    try:
        obj: Any = importlib.import_module(modname)
    except Exception as exc:  # any import problem is a fact worth recording
        facts.update(exists=False, missing=f"import failed: {type(exc).__name__}: {exc}")
        return facts
    owner = obj
    for part in qualname.split("."):
        if not hasattr(obj, part):
            facts.update(
                exists=False, missing=f"no attribute {part!r} on {getattr(obj, '__name__', obj)}"
            )
            return facts
        owner, obj = obj, getattr(obj, part)
        last = part
    facts["exists"] = True
    facts["kind"] = _kind(owner, last, obj)
    facts["defined_in"] = "{}:{}".format(
        getattr(obj, "__module__", None),
        getattr(obj, "__qualname__", None),
    )
    facts["source_sha256"] = _sha256(obj)
    if inspect.isclass(obj):
        if dataclasses.is_dataclass(obj):
            facts["fields"] = [f.name for f in dataclasses.fields(obj)]
            params = getattr(obj, "__dataclass_params__", None)
            if params is not None:
                facts["dataclass_params"] = {
                    k: getattr(params, k) for k in ("eq", "order", "frozen") if hasattr(params, k)
                }
        facts["parameters"] = _signature(obj)
    else:
        facts["parameters"] = _signature(obj)
    if spec.endswith(":get_args_parser"):
        facts["parser"] = _parser_facts(obj)
    return facts


def main() -> None:
    _clean_env()
    import torch

    src = (
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "src")
    )

    result = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "targets": {spec: probe(spec) for spec in targets(src)},
    }
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
