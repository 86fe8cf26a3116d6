"""torchrun's command line, read by torch's own parser.

:func:`parse` runs ``torch.distributed.run.parse_args`` with the given environment standing in
for ``os.environ`` (torch reads the ``PET_*`` defaults when it builds the parser), so every
spelling torchrun accepts (``--a b``, ``--a=b``, dashes, abbreviations, ``PET_*``) is understood
exactly as torchrun understands it.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence

from .errors import ConfigError

#: ``parse(argv) -> argparse.Namespace``; raises ``SystemExit`` as argparse does.
Parser = Callable[[List[str]], Any]

TORCH_TRUE = frozenset({"1", "true", "t", "yes", "y"})
TORCH_FALSE = frozenset({"0", "false", "f", "no", "n"})


@dataclass(frozen=True)
class LaunchArgs:
    """What the plan needs to know of a torchrun command line."""

    standalone: bool
    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_conf: str
    #: None when not given (or when this torch has no ``--local_addr``).
    local_addr: Optional[str]
    nnodes: str
    nproc_per_node: str
    rdzv_id: str
    #: Index in argv of the training script (or module) name; added arguments go before it.
    script_index: int


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    if env is os.environ:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def torch_parser() -> Parser:
    """torchrun's own ``parse_args``."""
    from torch.distributed import run

    parse: Parser = run.parse_args
    return parse


def parse(
    argv: Sequence[str], env: Mapping[str, str], parser: Optional[Parser] = None
) -> Optional[LaunchArgs]:
    """Parse ``argv`` as torchrun would with ``env``; None when torchrun itself would stop
    (``--help``, a usage error): then torchrun must see the command line unchanged.

    A ``PET_*`` flag variable torch cannot read raises :class:`ConfigError`.
    """
    argv = list(argv)
    parse_args = parser or torch_parser()
    sink = io.StringIO()
    try:
        with _environment(env), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            ns = parse_args(argv)
    except SystemExit:
        return None
    except ValueError as exc:  # check_env: bool(int(PET_FLAG)) on a non-integer
        bad = sorted(k for k, v in env.items() if k.startswith("PET_") and not _is_int(v))
        name = bad[0] if bad else "a PET_* variable"
        raise ConfigError(
            f"{name}={env.get(name, '')!r} cannot be read by torchrun ({exc}); "
            "flags accept an integer (0 or 1)"
        ) from None
    script_args = list(getattr(ns, "training_script_args", []) or [])
    script_index = len(argv) - len(script_args) - 1
    if script_index < 0 or argv[script_index] != ns.training_script:
        script_index = -1
    return LaunchArgs(
        standalone=bool(getattr(ns, "standalone", False)),
        rdzv_backend=str(getattr(ns, "rdzv_backend", "static") or ""),
        rdzv_endpoint=str(getattr(ns, "rdzv_endpoint", "") or ""),
        rdzv_conf=str(getattr(ns, "rdzv_conf", "") or ""),
        local_addr=getattr(ns, "local_addr", None) or None,
        nnodes=str(getattr(ns, "nnodes", "1:1")),
        nproc_per_node=str(getattr(ns, "nproc_per_node", "1")),
        rdzv_id=str(getattr(ns, "rdzv_id", "none")),
        script_index=script_index,
    )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def parse_rdzv_conf(text: str) -> Dict[str, str]:
    """``k1=v1,k2=v2`` as torch reads it (last duplicate wins); bad pairs raise ConfigError."""
    conf: Dict[str, str] = {}
    if not text.strip():
        return conf
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not key or not sep or not value:
            raise ConfigError(
                f"--rdzv_conf {text!r}: {item.strip()!r} is not KEY=VALUE; "
                "accepted: KEY=VALUE pairs separated by commas, no empty key or value"
            )
        conf[key] = value
    return conf


def format_rdzv_conf(conf: Mapping[str, str]) -> str:
    """The inverse of :func:`parse_rdzv_conf`."""
    return ",".join(f"{k}={v}" for k, v in conf.items())


def parse_torch_bool(key: str, value: str) -> bool:
    """A rendezvous boolean as torch's ``get_as_bool`` reads it, or ConfigError."""
    low = value.strip().lower()
    if low in TORCH_TRUE:
        return True
    if low in TORCH_FALSE:
        return False
    raise ConfigError(
        f"--rdzv_conf {key}={value!r} is not valid; accepted: 1/0, true/false, t/f, yes/no, y/n"
    )


def given_options(
    argv: Sequence[str], env: Mapping[str, str], parser_factory: Optional[Callable[[], Any]] = None
) -> Optional[FrozenSet[str]]:
    """The torchrun options (argparse ``dest`` names) the user set: on the command line or by a
    non-empty ``PET_*`` variable. None when torchrun would stop on this command line."""
    if parser_factory is None:
        from torch.distributed import run

        parser_factory = run.get_args_parser
    with _environment({}):
        parser = parser_factory()
    unset = object()
    for action in parser._actions:
        action.default = unset
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            ns = parser.parse_args(list(argv))
    except SystemExit:
        return None
    given = {dest for dest, value in vars(ns).items() if value is not unset}
    given |= {a.dest for a in parser._actions if env.get(f"PET_{a.dest.upper()}", "").strip()}
    return frozenset(given)
