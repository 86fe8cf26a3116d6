"""The preflight's pure part: what nodes report, the verdict and the per-node table."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import network


@dataclass(frozen=True)
class NodeReport:
    """What one node says about itself (the ``hello`` message)."""

    hostname: str
    node_rank: Optional[int] = None
    is_host: Optional[bool] = None
    address: Optional[str] = None
    probe_port: Optional[int] = None
    interface: Optional[str] = None
    warnings: Tuple[str, ...] = ()
    failures: Tuple[str, ...] = ()

    def to_json(self) -> Dict[str, Any]:
        """The report as a JSON object."""
        return {
            "hostname": self.hostname,
            "node_rank": self.node_rank,
            "is_host": self.is_host,
            "address": self.address,
            "probe_port": self.probe_port,
            "interface": self.interface,
            "warnings": list(self.warnings),
            "failures": list(self.failures),
        }

    @classmethod
    def from_json(cls, data: object) -> NodeReport:
        """Read a report; raises ``ValueError`` for anything malformed."""
        if not isinstance(data, dict):
            raise ValueError("report is not an object")

        def opt(key: str, kind: type) -> Any:
            value = data.get(key)
            wrong_bool = isinstance(value, bool) and kind is not bool
            if value is not None and (wrong_bool or not isinstance(value, kind)):
                raise ValueError(f"report field {key!r} is not a {kind.__name__}")
            return value

        def texts(key: str) -> Tuple[str, ...]:
            value = data.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"report field {key!r} is not a list of strings")
            return tuple(value)

        hostname = data.get("hostname")
        if not isinstance(hostname, str):
            raise ValueError("report has no hostname")
        return cls(
            hostname=hostname,
            node_rank=opt("node_rank", int),
            is_host=opt("is_host", bool),
            address=opt("address", str),
            probe_port=opt("probe_port", int),
            interface=opt("interface", str),
            warnings=texts("warnings"),
            failures=texts("failures"),
        )


@dataclass(frozen=True)
class Member:
    """A node as the collector saw it: its report and what happened afterwards."""

    id: int
    report: NodeReport
    #: Peer id -> why it could not be reached; None when no probe results arrived.
    unreachable: Optional[Dict[int, str]] = None
    #: What went wrong talking to this node after it joined (None: nothing).
    problem: Optional[str] = None


@dataclass(frozen=True)
class Verdict:
    """The job-wide outcome."""

    ok: bool
    nodes: int
    reasons: Tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """``preflight: OK (4 nodes)`` or ``preflight: FAIL: <reason>; <reason>``."""
        if self.ok:
            return f"preflight: OK ({self.nodes} node{'s' if self.nodes != 1 else ''})"
        return "preflight: FAIL: " + "; ".join(self.reasons)


def expected_nodes(min_nodes: int, max_nodes: int, step_nodes: Optional[int]) -> int:
    """How many nodes the preflight waits for: ``--nnodes=N``: N; ``MIN:MAX``: the Slurm step's
    node count when it lies in MIN..MAX, else MAX."""
    if min_nodes == max_nodes:
        return max_nodes
    if step_nodes is not None and min_nodes <= step_nodes <= max_nodes:
        return step_nodes
    return max_nodes


def missing_names(
    reports: Sequence[NodeReport], expected: int, names_by_rank: Sequence[str] = ()
) -> List[str]:
    """Names for the nodes that never joined: by node rank when every report has one."""
    count = expected - len(reports)
    if count <= 0:
        return []
    ranks = [r.node_rank for r in reports]
    if all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        absent = [k for k in range(expected) if k not in ranks][:count]
        names = [names_by_rank[k] if k < len(names_by_rank) else f"node rank {k}" for k in absent]
        if len(names) == count:
            return names
    seen = {r.hostname for r in reports}
    unseen = [n for n in names_by_rank if n not in seen][:count]
    if len(unseen) == count:
        return unseen
    return [f"{count} of {expected} nodes"]


def labels(members: Sequence[Member]) -> Dict[int, str]:
    """Member id -> a unique display name (hostname, disambiguated when it repeats)."""
    counts: Dict[str, int] = {}
    for m in members:
        counts[m.report.hostname] = counts.get(m.report.hostname, 0) + 1
    out: Dict[int, str] = {}
    for m in members:
        name = m.report.hostname or "?"
        if counts[m.report.hostname] > 1:
            rank = m.report.node_rank
            name += f"[rank {rank}]" if rank is not None else f"[#{m.id}]"
        out[m.id] = name
    return out


def _where(report: NodeReport) -> str:
    if report.address is None:
        return "no address"
    port = f":{report.probe_port}" if report.probe_port is not None else ""
    return network.format_host(report.address) + port


def by_rank(members: Sequence[Member]) -> List[Member]:
    """``members`` ordered by node rank (none last), then by join order."""
    return sorted(
        members, key=lambda m: (m.report.node_rank is None, m.report.node_rank or 0, m.id)
    )


def compute_verdict(
    members: Sequence[Member], expected: int, missing: Sequence[str], endpoint: str
) -> Verdict:
    """The verdict from what the collector gathered; reasons name each broken node."""
    names = labels(members)
    members = by_rank(members)
    reasons: List[str] = []
    hosts = [names[m.id] for m in members if m.report.is_host]
    if len(hosts) > 1:
        reasons.append(f"{len(hosts)} nodes consider themselves host: {', '.join(hosts)}")
    elif members and not hosts:
        reasons.append("no node that reached the collector considers itself host")
    claims: Dict[int, List[str]] = {}
    for m in members:
        if m.report.node_rank is not None:
            claims.setdefault(m.report.node_rank, []).append(names[m.id])
    reasons += [
        f"node rank {rank} is claimed by {len(who)} nodes: {', '.join(who)}"
        for rank, who in sorted(claims.items())
        if len(who) > 1
    ]
    reasons += [f"{name}: never reached the endpoint {endpoint}" for name in missing]
    for m in members:
        reasons += [f"{names[m.id]}: {failure}" for failure in m.report.failures]
        if m.problem is not None:
            reasons.append(f"{names[m.id]}: {m.problem}")
    ids = {m.id for m in members}
    for target in members:
        if target.report.address is None or target.report.probe_port is None:
            continue
        sources = [
            (names[m.id], m.unreachable[target.id])
            for m in members
            if m.unreachable is not None and target.id in m.unreachable
        ]
        if not sources:
            continue
        probers = [m for m in members if m.unreachable is not None and m.id != target.id]
        who = (
            "every other node"
            if len(sources) == len(probers) > 1
            else ", ".join(name for name, _ in sources)
        )
        errors = sorted({err for _, err in sources})
        reasons.append(
            f"{names[target.id]}: its address {_where(target.report)} is unreachable from "
            f"{who} ({', '.join(errors)})"
        )
    for m in members:
        unknown = set(m.unreachable or ()) - ids
        if unknown:
            reasons.append(f"{names[m.id]}: probe results for unknown nodes {sorted(unknown)}")
    total = max(expected, len(members))
    return Verdict(ok=not reasons, nodes=total, reasons=tuple(reasons))


def render_table(members: Sequence[Member], missing: Sequence[str], endpoint: str) -> str:
    """The per-node table, sorted by node rank, then the nodes' warnings and failures."""
    names = labels(members)
    order = by_rank(members)
    header = ("node", "rank", "host", "address", "iface", "endpoint", "peers unreachable")
    rows: List[Tuple[str, ...]] = [header]
    for m in order:
        r = m.report
        if m.unreachable is None:
            peers = "? (no probe results)"
        else:
            peers = ", ".join(names.get(k, f"#{k}") for k in sorted(m.unreachable)) or "none"
        rows.append(
            (
                names[m.id],
                "-" if r.node_rank is None else str(r.node_rank),
                {True: "yes", False: "no", None: "?"}[r.is_host],
                r.address or "-",
                r.interface or "-",
                "reached",
                peers,
            )
        )
    rows += [(name, "-", "-", "-", "-", "NOT reached", "-") for name in missing]
    widths = [max(len(row[k]) for row in rows) for k in range(len(header))]
    lines = [f"preflight: endpoint {endpoint}, {len(members) + len(missing)} nodes"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for m in order:
        lines += [f"  {names[m.id]}: warning: {w}" for w in m.report.warnings]
        lines += [f"  {names[m.id]}: WILL FAIL: {f}" for f in m.report.failures]
        if m.problem is not None:
            lines.append(f"  {names[m.id]}: {m.problem}")
    return "\n".join(lines)


def describe_error(exc: BaseException) -> str:
    """``No route to host``, ``timed out``, ``Connection refused`` …"""
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def no_collector_reason(endpoint: str, timeout: float, last: Optional[BaseException]) -> str:
    """Why a node found no collector at the endpoint, from the last connection error."""
    text = describe_error(last) if last is not None else "no address to try"
    code = getattr(last, "errno", None)
    if code == errno.ECONNREFUSED:
        why = (
            "nothing listens there: no node considers itself host, or the host is not the node "
            "the endpoint names"
        )
    else:
        why = "the endpoint is unreachable from this node, or no node considers itself host"
    return f"no node accepted at {endpoint} within {timeout:g} s: {why} ({text})"
