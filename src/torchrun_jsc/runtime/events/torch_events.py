"""The job's events through torch's own events API (``torch.distributed.elastic.events``), so
that the handler a user gave torch (``--event-log-handler``, or one registered with torch's
handlers) sees them: ``torchrun_jsc.<event>`` events from the agent, their fields as metadata
(a value that is not a number, a string, a boolean or null as JSON)."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from .entry import Entry

Value = Union[str, int, float, bool, None]


def metadata(entry: Entry) -> Dict[str, Value]:
    """The event's metadata for torch: the common keys and its own fields, flat."""
    found: Dict[str, Value] = {"job": entry.job, "run": entry.run, "node": entry.node}
    for name, value in entry.fields.items():
        plain = value is None or isinstance(value, (str, int, float, bool))
        found[name] = value if plain else json.dumps(value, separators=(",", ":"), default=str)
    return found


def record(entry: Entry, handler: str) -> Optional[str]:
    """Give ``entry`` to torch's handler ``handler``; why it could not (None: it did)."""
    try:
        from torch.distributed.elastic import events
        from torch.distributed.elastic.events.api import Event, EventSource
    except ImportError as exc:
        return f"torch has no events API ({exc})"
    try:
        event: Any = Event(
            name=f"torchrun_jsc.{entry.event}",
            source=EventSource.AGENT,
            timestamp=int(entry.time * 1000),
            metadata=dict(metadata(entry)),
        )
        events.record(event, handler)
    except Exception as exc:  # a handler torch does not know, or one that fails
        return f"{type(exc).__name__}: {exc}"
    return None
