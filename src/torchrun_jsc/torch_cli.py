"""torchrun's command line, read by torch's own parser.

:class:`CommandLine` builds torch's ``ArgumentParser`` once, with the ``PET_*`` defaults of the
given environment (torch's parser reads them from ``os.environ`` while it is built; here the
mapping given is authoritative, and ``os.environ`` is never changed), and parses argument lists
with it: every spelling torchrun accepts (``--a b``, ``--a=b``, dashes, abbreviations,
``PET_*``) means exactly what it means to torchrun.

It also finds :attr:`Parsed.insert_at`, the one place where options may be added to a command
line: after every option of the user's and before the training script, and before a ``--`` that
precedes the script (an option after that ``--`` would become the script). Each position is
proven by parsing the command line with an option inserted there.

The parser is injectable (:class:`TorchCli`): tests can use torch's, or any other of the same
shape.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
from typing import Any, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from . import envvars
from .errors import ConfigError

#: A value no user types, used to prove where inserted options land.
_PROBE = "torchrun_jsc-probe-\u2063"


class TorchCli:
    """torchrun's own parser and checks (``torch.distributed.run``)."""

    def parser(self) -> argparse.ArgumentParser:
        """A fresh ``get_args_parser()`` (torch reads ``os.environ``'s ``PET_*`` while building)."""
        from torch.distributed import run

        parser: argparse.ArgumentParser = run.get_args_parser()
        return parser

    def nnodes(self, text: str) -> Tuple[int, int]:
        """``--nnodes`` as torch reads it (``parse_min_max_nnodes``); raises as torch does."""
        from torch.distributed import run

        low, high = run.parse_min_max_nnodes(text)
        return int(low), int(high)

    def local_world_size(self, word: str) -> Tuple[Optional[int], Optional[str]]:
        """``--nproc_per_node=word`` (``gpu``, ``auto``, ...) as torch reads it on this node
        (``determine_local_world_size``, which asks the devices): the worker count, or torch's
        reason for refusing it. ``(None, None)`` when this torch has no such function."""
        from torch.distributed import run

        determine = getattr(run, "determine_local_world_size", None)
        if determine is None:
            return None, None
        previous = logging.root.manager.disable
        logging.disable(logging.INFO)  # torch logs the value; it does so again at the launch
        try:
            return int(determine(word)), None
        except ValueError as exc:
            return None, str(exc)
        finally:
            logging.disable(previous)


class Stop(NamedTuple):
    """torchrun stops by itself on this command line: ``--help`` (code 0) or a usage error."""

    code: int
    text: str


class Parsed(NamedTuple):
    """A command line torchrun accepts."""

    values: Mapping[str, Any]
    #: Options (``dest`` names) set on the command line or by a non-empty ``PET_*`` variable.
    given: FrozenSet[str]
    #: Index in the argument list where added options go (see the module docstring).
    insert_at: int
    #: ``--version`` was given among the launcher's own options (torchrun has no such option).
    version_requested: bool = False
    #: Options (``dest`` names) whose value comes from a ``PET_*`` variable (not on the command
    #: line, which would win).
    from_env: FrozenSet[str] = frozenset()

    def source(self, dest: str) -> str:
        """Where the value of option ``dest`` was given: ``PET_NNODES`` or ``--nnodes``."""
        return option_source(dest, self.from_env)


def option_source(dest: str, from_env: FrozenSet[str]) -> str:
    """The name under which the user gave option ``dest``: its ``PET_*`` variable when only that
    set it, else the option (``--nnodes``)."""
    return _pet_name_of(dest) if dest in from_env else f"--{dest}"


class CommandLine:
    """torch's parser for one environment; :meth:`parse` reads argument lists with it."""

    def __init__(self, env: Mapping[str, str], cli: Optional[TorchCli] = None) -> None:
        self.cli = cli or TorchCli()
        self.env = env
        self.parser = _parser_for(self.cli, env)
        pet = _set(env)  # once: os.environ decodes every variable on each pass
        self._pet = {a.dest for a in self.parser._actions if _pet_name(a) in pet}

    def parse(self, argv: Sequence[str]) -> Union[Parsed, Stop]:
        """Parse ``argv`` as torchrun would; :class:`Stop` when torchrun would stop by itself."""
        argv = list(argv)
        first = self._run(argv)
        if isinstance(first, Stop):
            return self._maybe_version(argv, first)
        values, given, from_env = first
        insert_at = self._insert_position(argv, values)
        return Parsed(values=values, given=given, insert_at=insert_at, from_env=from_env)

    def values(self, argv: Sequence[str]) -> Union[Dict[str, Any], Stop]:
        """Only the values: one parse."""
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                return vars(self.parser.parse_args(list(argv)))
        except SystemExit as exc:
            return Stop(code=exc.code if isinstance(exc.code, int) else 2, text=sink.getvalue())

    # ------------------------------------------------------------------ internals

    def _run(
        self, argv: List[str]
    ) -> Union[Tuple[Dict[str, Any], FrozenSet[str], FrozenSet[str]], Stop]:
        """The values, which options were given, and which of them by ``PET_*`` only: two
        parses, the second with every default replaced by a marker."""
        values = self.values(argv)
        if isinstance(values, Stop):
            return values
        unset = object()
        saved = [(a, a.default) for a in self.parser._actions]
        for action, _ in saved:
            action.default = unset
        try:
            bare = self.values(argv)
        finally:
            for action, default in saved:
                action.default = default
        assert not isinstance(bare, Stop), "argv parsed once already"
        on_line = {dest for dest, value in bare.items() if value is not unset}
        return values, frozenset(on_line | self._pet), frozenset(self._pet - on_line)

    def _insert_position(self, argv: List[str], values: Mapping[str, Any]) -> int:
        script = values.get("training_script")
        tail = list(values.get("training_script_args") or [])
        candidates: List[int] = []
        for at in (len(argv) - len(tail) - 1, len(argv) - len(tail) - 2):
            if 0 <= at < len(argv) and argv[at] == script:
                if at > 0 and argv[at - 1] == "--":
                    candidates.append(at - 1)
                candidates.append(at)
        candidates += [i for i in range(len(argv), -1, -1) if i not in candidates]
        for at in candidates:
            if self._lands(argv, at, script, tail):
                return at
        raise ConfigError(
            "cannot find where torchrun's own options end in this command line; accepted: "
            "torchrun options, then the training script (or -m module) and its arguments"
        )

    def _lands(self, argv: List[str], at: int, script: Any, tail: List[str]) -> bool:
        probe = f"--rdzv_id={_PROBE}"
        found = self.values([*argv[:at], probe, *argv[at:]])
        return (
            not isinstance(found, Stop)
            and found.get("rdzv_id") == _PROBE
            and found.get("training_script") == script
            and list(found.get("training_script_args") or []) == tail
        )

    def _maybe_version(self, argv: List[str], stop: Stop) -> Union[Parsed, Stop]:
        if stop.code == 0 or "--version" not in argv:
            return stop
        at = argv.index("--version")
        rest = argv[:at] + argv[at + 1 :]
        found = self.parse(rest)
        if isinstance(found, Parsed) and at <= found.insert_at:
            return found._replace(version_requested=True)
        if isinstance(found, Stop) and "--version" not in rest:
            # ``torchrun_jsc --version`` alone: torchrun's options, and no script at all
            alone = self.parse([*rest, _PROBE])
            if isinstance(alone, Parsed) and alone.values.get("training_script") == _PROBE:
                return alone._replace(insert_at=len(rest), version_requested=True)
        return stop


def _set(env: Mapping[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PET_") and v.strip()}


def _pet_name(action: argparse.Action) -> str:
    return _pet_name_of(action.dest)


def _pet_name_of(dest: str) -> str:
    return f"PET_{dest.upper()}"


def _reads_pet(action: argparse.Action) -> str:
    """``"env"``, ``"flag"`` (torch's ``env``/``check_env`` actions) or ``""``."""
    return {"env": "env", "check_env": "flag"}.get(type(action).__name__, "")


def _parser_for(cli: TorchCli, env: Mapping[str, str]) -> argparse.ArgumentParser:
    """torch's parser with the ``PET_*`` defaults of ``env``.

    torch builds its actions' defaults from ``os.environ``. When ``env`` agrees with it on every
    ``PET_*`` variable (a real launch: ``env`` is ``os.environ``), that is already right. When it
    does not (tests, a library caller), the parser must have been built from an environment
    without them, and ``env``'s values are applied here the way torch applies them.
    """
    check_log_level(env)
    live = {k: v for k, v in os.environ.items() if k.startswith("PET_")}
    wanted = {k: v for k, v in env.items() if k.startswith("PET_")}
    try:
        parser = cli.parser()
    except ValueError as exc:
        raise _build_error(live, exc) from None
    if live == wanted:
        return parser
    if live:
        raise RuntimeError(
            "torchrun_jsc reads PET_* variables from the environment it is given; this process's"
            " own PET_* variables differ from it"
        )
    for action in parser._actions:
        kind, name = _reads_pet(action), _pet_name(action)
        if not kind or name not in wanted:
            continue
        text = wanted[name]
        if kind == "flag":
            try:
                action.default = bool(int(text))
            except ValueError:
                raise _flag_error({name: text}) from None
        else:
            action.default = text
            if text:
                action.required = False
    return parser


#: What Python's ``logging`` (and so torch, which passes ``LOGLEVEL`` to ``setLevel``) accepts.
LOG_LEVELS = "DEBUG, INFO, WARNING, ERROR, CRITICAL (upper case; also WARN, FATAL, NOTSET)"


def check_log_level(env: Mapping[str, str]) -> None:
    """torch's loggers call ``setLevel(os.environ.get("LOGLEVEL", ...))`` as torch's modules are
    imported: a set ``LOGLEVEL`` that is not a level name (``info``, ``10``, empty) stops every
    launch with a traceback. Raises :class:`ConfigError` for it."""
    text = env.get("LOGLEVEL")
    if text is not None and not isinstance(logging.getLevelName(text), int):
        raise envvars.invalid("LOGLEVEL", text, LOG_LEVELS)


def _build_error(candidates: Mapping[str, str], exc: ValueError) -> ConfigError:
    """The cause of a ``ValueError`` while torch's parser was built: a ``PET_*`` flag that is
    not an integer (torch's ``check_env`` reads it with ``bool(int(value))``), else torch's own
    words."""
    bad = sorted(k for k, v in candidates.items() if not _is_int(v))
    shown = str(exc).rsplit(":", 1)[-1].strip().strip("'\"")
    named = [k for k in bad if candidates[k].strip() == shown]
    if "int()" in str(exc) and (named or bad):
        return _flag_error({k: candidates[k] for k in named or bad})
    return ConfigError(
        f"torch.distributed.run cannot be loaded: ValueError {envvars.shown(str(exc))}"
    )


def _flag_error(candidates: Mapping[str, str]) -> ConfigError:
    name = sorted(candidates)[0]
    return ConfigError(
        f"{name}={envvars.shown(candidates[name])} cannot be read by torchrun; accepted: an"
        " integer (0 or 1) for a flag"
    )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
