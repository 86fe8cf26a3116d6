"""The values of the ``TORCHRUN_JSC_*`` settings: their parsers and the bounds they enforce.

Each parser takes the variable's text and returns its value or raises :class:`ValueError`;
:data:`torchrun_jsc.settings.table.VARIABLES` names the parser of every variable.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Tuple

#: Largest node rank accepted anywhere (far above any machine's node count).
MAX_NODE_RANK = 1_000_000
#: Longest wait any setting may ask for, in seconds (one day).
MAX_SECONDS = 86_400.0

#: Signals the agent may forward to its workers and go on (TORCHRUN_JSC_FORWARD_SIGNALS).
FORWARDABLE = ("SIGUSR1", "SIGUSR2")

_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})
SWITCH = "0 or 1 (as the original torchrun_jsc: any integer, 0 is off), true/false, yes/no, on/off"


def switch(text: str) -> bool:
    """A switch as the original torchrun_jsc read it (``bool(int(value))``), plus words."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return bool(int(low))


def rank(text: str) -> int:
    """An integer in 0..MAX_NODE_RANK (ASCII digits)."""
    if not text.isascii() or not text.isdigit() or int(text) > MAX_NODE_RANK:
        raise ValueError(text)
    return int(text)


def seconds(text: str, low: float = 0.0, open_low: bool = False) -> float:
    """A finite number of seconds in [low, MAX_SECONDS] (or (low, ...] with ``open_low``)."""
    if not text.isascii():
        raise ValueError(text)
    number = float(text)
    if not math.isfinite(number) or number > MAX_SECONDS or number < low:
        raise ValueError(text)
    if open_low and number == low:
        raise ValueError(text)
    return number


def positive_seconds(text: str) -> float:
    """Seconds in (0, MAX_SECONDS]."""
    return seconds(text, open_low=True)


def peer_seconds(text: str) -> float:
    """0 (off) or seconds in MIN_PEER_TIMEOUT..MAX_SECONDS."""
    number = seconds(text)
    if 0 < number < MIN_PEER_TIMEOUT:
        raise ValueError(text)
    return number


def signal_names(text: str) -> Tuple[str, ...]:
    """A comma-separated list of :data:`FORWARDABLE` names (``SIG`` optional), or ``none``."""
    if text.lower() == "none":
        return ()
    names = []
    for item in text.split(","):
        name = item.strip().upper()
        name = name if name.startswith("SIG") else "SIG" + name
        if name not in FORWARDABLE:
            raise ValueError(text)
        if name not in names:
            names.append(name)
    return tuple(names)


#: Peer timeouts below this are refused: a busy node must never be declared lost.
MIN_PEER_TIMEOUT = 10.0


def suffix(text: str) -> str:
    """A host suffix: letters, digits, ``.``, ``-`` (at most 63, no ``..``); ``none`` in any case
    (``None``): empty."""
    if text.lower() == "none":
        return ""
    ok = all((c.isascii() and c.isalnum()) or c in ".-" for c in text)
    if not ok or len(text) > 63 or ".." in text:
        raise ValueError(text)
    return text


#: The longest path ``TORCHRUN_JSC_EVENTS`` accepts (Linux's PATH_MAX).
MAX_PATH = 4096


def events_target(text: str) -> str:
    """``TORCHRUN_JSC_EVENTS``: a file or folder path (no control characters); ``none`` in any
    case: off (``""``)."""
    if text.lower() == "none":
        return ""
    if len(text) > MAX_PATH or any(ord(c) < 32 for c in text):
        raise ValueError(text)
    return text


def explain_format(text: str) -> str:
    """``TORCHRUN_JSC_EXPLAIN``'s format: ``text`` or ``json``; ``1`` is ``text``."""
    if text == "1":
        return "text"
    if text not in ("text", "json"):
        raise ValueError(text)
    return text


def choice(*options: str) -> Callable[[str], str]:
    """A parser that accepts exactly one of ``options``."""

    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(text)
        return text

    return parse


class Variable(NamedTuple):
    """One documented environment variable; ``default`` is the value used when it is unset.

    ``accepted`` goes into error messages; ``short`` and ``meaning`` (markdown) into the README's
    settings table, which :func:`markdown_table` writes.
    """

    name: str
    field: str
    parse: Callable[[str], Any]
    default: Any
    shown_default: str
    accepted: str
    meaning: str
    short: str = ""


def count(most: int) -> Callable[[str], int]:
    """A parser of an integer in 0..``most`` (ASCII digits)."""

    def parse(text: str) -> int:
        if not text.isascii() or not text.isdigit() or int(text) > most:
            raise ValueError(text)
        return int(text)

    return parse


def exit_code_or_none(text: str) -> Optional[int]:
    """An exit code in 1..255, or ``none`` (None)."""
    if text.lower() == "none":
        return None
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 255:
        raise ValueError(text)
    return int(text)


def one_signal(text: str) -> str:
    """One of :data:`FORWARDABLE` (``SIG`` optional)."""
    names = signal_names(text)
    if len(names) != 1 or "," in text:
        raise ValueError(text)
    return names[0]
