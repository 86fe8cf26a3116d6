"""Render a prepared launch (settings, facts, plan) as text or JSON (``TORCHRUN_JSC_EXPLAIN``)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List, Optional

from .plan import Prepared

#: Explain's exit code for each verdict of a plan (torchrun stopping by itself: 2).
EXIT = {"ok": 0, "fail": 1, "refused": 2, "error": 2}


def as_dict(prepared: Prepared) -> Dict[str, Any]:
    """A JSON-ready view of everything torchrun_jsc decided on this node, and why."""
    plan, facts = prepared.plan, prepared.facts
    return {
        "torch_version": plan.torch_version,
        "strategy": plan.strategy,
        "node": {
            "hostname": facts.hostname,
            "interfaces": [i._asdict() for i in facts.interfaces],
            "python": ".".join(map(str, facts.python_version)),
        },
        "endpoint": {
            "host": facts.endpoint_host,
            "addresses": list(facts.endpoint_addresses),
            "resolve_error": facts.resolve_error,
            "local_addresses": list(facts.local_endpoint_addresses),
            "route_sources": dict(facts.route_sources),
        },
        "node_rank": prepared.request.node_rank,
        "node_rank_source": prepared.request.node_rank_source,
        "host_node_rank": prepared.settings.host_node_rank,
        "is_host": plan.is_host,
        "advertised_address": plan.advertised_address,
        "interface": plan.interface,
        "decisions": [d._asdict() for d in plan.decisions],
        "added_args": list(plan.added_args),
        "argv": list(plan.argv),
        "env": dict(plan.env),
        "patches": [{"name": p.name, "params": p.data, "reason": p.reason} for p in plan.patches],
        "warnings": list(plan.warnings),
        "predicted_failures": list(plan.predicted_failures),
        "refusal": plan.refusal,
        "error": _torchrun_error(prepared) or plan.error,
        "verdict": _verdict(prepared),
        "gather_seconds": round(facts.seconds, 4),
    }


def escaped(text: str) -> str:
    """``text`` with every byte that is not UTF-8 written ``\\xff``: ``sys.argv`` and
    ``os.environ`` keep such bytes as lone surrogates, which a terminal cannot print (any other
    lone surrogate is written ``\\udXXX``)."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return "".join(
        f"\\x{ord(c) - 0xDC00:02x}"
        if "\udc80" <= c <= "\udcff"
        else f"\\u{ord(c):04x}"
        if "\ud800" <= c <= "\udfff"
        else c
        for c in text
    )


def for_stream(text: str, stream: Any) -> str:
    """``text`` as ``stream`` can print it: a character its encoding lacks written escaped
    (``\\xfc``) instead of ending in ``UnicodeEncodeError``."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def render(prepared: Prepared, style: str) -> str:
    """``style`` is ``"text"`` or ``"json"`` (JSON escapes everything non-ASCII itself)."""
    data = as_dict(prepared)
    if style == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return escaped(_text(data))


def _text(data: Dict[str, Any]) -> str:
    lines: List[str] = [
        f"torchrun_jsc explain on {data['node']['hostname'] or '?'}",
        f"  torch {data['torch_version']}, strategy for {data['strategy']}",
    ]
    ep = data["endpoint"]
    if ep["host"] is not None:
        lines.append(
            f"  endpoint {ep['host']} -> {', '.join(ep['addresses']) or 'nothing'}"
            + (f" ({ep['resolve_error']})" if ep["resolve_error"] else "")
        )
        lines.append(f"    of this node: {', '.join(ep['local_addresses']) or 'none'}")
    if data["node_rank"] is not None:
        lines.append(
            f"  node rank {data['node_rank']} (from {data['node_rank_source']}), "
            f"host node rank {data['host_node_rank']}"
        )
    lines.append(
        "  interfaces: "
        + ", ".join(f"{i['name']}={i['address']}" for i in data["node"]["interfaces"])
    )
    lines.append("  decisions:")
    lines += [f"    {d['topic']}: {d['value']}  -- {d['reason']}" for d in data["decisions"]]
    lines.append("  torchrun arguments: " + shlex.join(data["argv"]))
    if data["env"]:
        lines.append("  environment: " + " ".join(f"{k}={v}" for k, v in data["env"].items()))
    for p in data["patches"]:
        lines.append(f"  patch {p['name']} {p['params'] or ''} -- {p['reason']}")
    lines += [f"  warning: {w}" for w in data["warnings"]]
    lines += [f"  WILL FAIL: {f}" for f in data["predicted_failures"]]
    if data["refusal"]:
        lines.append(f"  REFUSED: {data['refusal']}")
    if data["error"]:
        lines.append(f"  ERROR: {data['error']}")
    lines.append(f"  verdict: {data['verdict']}")
    return "\n".join(lines)


def _torchrun_error(prepared: Prepared) -> Optional[str]:
    """torchrun's own usage error (its last line), when it rejects the command line."""
    stop = prepared.request.stop
    if stop is None or stop.code == 0:
        return None
    lines = [ln for ln in stop.text.splitlines() if ln.strip()]
    return lines[-1] if lines else f"torchrun exits with {stop.code}"


def _verdict(prepared: Prepared) -> str:
    """The plan's verdict (:attr:`~torchrun_jsc.plan.Plan.verdict`), or ``error`` when torchrun
    itself rejects the command line."""
    return "error" if _torchrun_error(prepared) is not None else prepared.plan.verdict


def exit_code(prepared: Prepared) -> int:
    """Explain's exit code: by the plan's verdict (:data:`EXIT`), 2 when torchrun itself stops
    (its help, a usage error)."""
    return 2 if prepared.request.stop is not None else EXIT[prepared.plan.verdict]


def render_error(message: str, style: str) -> str:
    """An input error in the explain format asked for (nothing was planned)."""
    if style == "json":
        return json.dumps({"verdict": "error", "error": message}, indent=2)
    return escaped(f"torchrun_jsc explain: error: {message}\n  verdict: error")
