"""Reading environment variables: the one helper and the one message style for bad values.

Every variable torchrun_jsc reads (its own ``TORCHRUN_JSC_*`` settings and Slurm's ``SLURM_*``)
goes through :func:`value` and :func:`parsed`: blank counts as unset, and a value that cannot be
used raises :class:`~torchrun_jsc.errors.ConfigError` with one line::

    NAME='value' is not valid[: reason]; accepted: what is accepted
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, TypeVar

from .errors import ConfigError

T = TypeVar("T")

#: Longest value shown in a message (a pasted hostlist can be megabytes).
SHOWN = 120


def shown(text: str) -> str:
    """``text`` quoted for a one-line message, shortened to about :data:`SHOWN` characters."""
    if len(text) > SHOWN:
        return repr(text[:SHOWN]) + "..."
    return repr(text)


def invalid(name: str, text: str, accepted: str, reason: str = "") -> ConfigError:
    """The project's error for a bad value of variable ``name``."""
    why = f": {reason}" if reason else ""
    return ConfigError(f"{name}={shown(text)} is not valid{why}; accepted: {accepted}")


def value(env: Mapping[str, str], name: str) -> Optional[str]:
    """``env[name]`` without surrounding blanks; None when unset or blank."""
    text = env.get(name)
    if text is None or not text.strip():
        return None
    return text.strip()


def parsed(
    env: Mapping[str, str], name: str, parse: Callable[[str], T], accepted: str
) -> Optional[T]:
    """``parse(value)`` of variable ``name``, None when unset; ``parse`` raises ``ValueError``
    (its message, if any, becomes the reason) for a value it does not accept."""
    text = value(env, name)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise invalid(name, text, accepted, _reason(exc, text)) from None


def _reason(exc: ValueError, text: str) -> str:
    message = str(exc)
    # int()/float() explain nothing a user can act on; the accepted values say it all.
    if not message or message == text or "literal" in message or "convert" in message:
        return ""
    return message
