"""The preflight's pure part: what nodes report, the verdict and the per-node table."""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

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
    #: The member ids the collector asked it to probe (None: every other member that can be
    #: probed, i.e. all pairs).
    targets: Optional[Tuple[int, ...]] = None


#: The verdict line names at most this many reasons (it goes to every node in one message);
#: the host prints them all.
REASONS_SHOWN = 20
#: Lists of node names inside one reason stop after this many.
NAMES_SHOWN = 8
#: Nodes that never joined and have no name from the node list: at most this many are listed
#: one by one (table rows), the rest are counted (``--nnodes=100000000`` names 16 ranks).
UNNAMED_MISSING_SHOWN = 16


@dataclass(frozen=True)
class Verdict:
    """The job-wide outcome."""

    ok: bool
    nodes: int
    reasons: Tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """``preflight: OK (4 nodes)`` or ``preflight: FAIL: <reason>; <reason>`` (at most
        :data:`REASONS_SHOWN` reasons, then how many more)."""
        if self.ok:
            return f"preflight: OK ({self.nodes} node{'s' if self.nodes != 1 else ''})"
        shown = list(self.reasons[:REASONS_SHOWN])
        if len(self.reasons) > REASONS_SHOWN:
            shown.append(
                f"and {len(self.reasons) - REASONS_SHOWN} more problems (the host lists them all)"
            )
        return "preflight: FAIL: " + "; ".join(shown)

    @property
    def truncated(self) -> bool:
        """Whether :attr:`line` leaves reasons out."""
        return len(self.reasons) > REASONS_SHOWN


def name_list(names: Sequence[str], limit: int = NAMES_SHOWN) -> str:
    """``a, b, c`` or, past ``limit`` names, ``a, b, …, h and 12 more``."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


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
    """Names for the nodes that never joined: by node rank when every report has one (the node
    list's name, else ``node rank K``), else the node list's names nobody reported, else a
    count. Ranks without a name are listed up to :data:`UNNAMED_MISSING_SHOWN`, the rest
    counted (``K more of E nodes``); time and memory grow with the reports and the node list,
    not with ``expected``."""
    count = expected - len(reports)
    if count <= 0:
        return []
    ranks = [r.node_rank for r in reports]
    known = {r for r in ranks if r is not None}
    if len(known) == len(ranks) and sum(1 for r in known if 0 <= r < expected) == len(known):
        names: List[str] = []
        unnamed = 0
        for k in range(expected):
            if k in known:
                continue
            if k < len(names_by_rank):
                names.append(names_by_rank[k])
            elif unnamed < UNNAMED_MISSING_SHOWN:
                names.append(f"node rank {k}")
                unnamed += 1
            else:
                break
        if len(names) < count:
            names.append(f"{count - len(names)} more of {expected} nodes")
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
    """The verdict from what the collector gathered; reasons name each broken node.

    Time grows with the members times their targets (all pairs only for members without
    :attr:`Member.targets`)."""
    names = labels(members)
    members = by_rank(members)
    reasons: List[str] = []
    hosts = [names[m.id] for m in members if m.report.is_host]
    if len(hosts) > 1:
        reasons.append(f"{len(hosts)} nodes consider themselves host: {name_list(hosts)}")
    elif members and not hosts:
        reasons.append("no node that reached the collector considers itself host")
    claims: Dict[int, List[str]] = {}
    for m in members:
        if m.report.node_rank is not None:
            claims.setdefault(m.report.node_rank, []).append(names[m.id])
    reasons += [
        f"node rank {rank} is claimed by {len(who)} nodes: {name_list(who)}"
        for rank, who in sorted(claims.items())
        if len(who) > 1
    ]
    if len(missing) <= NAMES_SHOWN:
        reasons += [f"{name}: never reached the endpoint {endpoint}" for name in missing]
    else:
        reasons.append(  # entries past the first few may be a count ("K more of E nodes")
            f"{expected - len(members)} of {expected} nodes never reached the endpoint "
            f"{endpoint}: {', '.join(missing[:NAMES_SHOWN])}, …"
        )
    for m in members:
        reasons += [f"{names[m.id]}: {failure}" for failure in m.report.failures]
        if m.problem is not None:
            reasons.append(f"{names[m.id]}: {m.problem}")
    reasons += _unreachable_reasons(members, names)
    ids = set(names)
    for m in members:
        unknown = set(m.unreachable or ()) - ids
        if unknown:
            reasons.append(f"{names[m.id]}: probe results for unknown nodes {sorted(unknown)}")
    total = max(expected, len(members))
    return Verdict(ok=not reasons, nodes=total, reasons=tuple(reasons))


def _probeable(report: NodeReport) -> bool:
    return report.address is not None and report.probe_port is not None


def _unreachable_reasons(members: Sequence[Member], names: Mapping[int, str]) -> List[str]:
    """One reason per member some prober could not reach: who failed, with the errors; "every
    node that probed it" (all pairs: "every other node") when all of its probers failed."""
    by_id = {m.id: m for m in members}
    position = {m.id: k for k, m in enumerate(members)}  # members come ordered by rank
    reported = [m for m in members if m.unreachable is not None]
    everybody = {m.id for m in members if _probeable(m.report)}
    probers: Dict[int, List[int]] = {}  # target -> members that were to probe it and answered
    failed: Dict[int, List[Tuple[int, str]]] = {}  # target -> (prober, error)
    all_pairs = True
    for m in reported:
        if m.targets is None:
            targets: Iterable[int] = everybody - {m.id}
        else:
            all_pairs = False
            targets = m.targets
        for t in targets:
            probers.setdefault(t, []).append(m.id)
        for t, error in (m.unreachable or {}).items():
            if t in by_id:
                failed.setdefault(t, []).append((m.id, error))
    reasons: List[str] = []
    for target in members:
        sources = failed.get(target.id)
        if not sources or not _probeable(target.report):
            continue
        asked = set(probers.get(target.id, ())) | {s for s, _ in sources}
        failing = [names[s] for s in sorted({s for s, _ in sources}, key=position.__getitem__)]
        if len(sources) == len(asked) > 1:
            who = (
                "every other node"
                if all_pairs and asked == {m.id for m in reported} - {target.id}
                else f"every node that probed it: {name_list(failing)}"
            )
        else:
            who = name_list(failing)
        errors = sorted({err for _, err in sources})
        reasons.append(
            f"{names[target.id]}: its address {_where(target.report)} is unreachable from "
            f"{who} ({', '.join(errors)})"
        )
    return reasons


def render_table(
    members: Sequence[Member], missing: Sequence[str], endpoint: str, expected: int
) -> str:
    """The per-node table, sorted by node rank, then the nodes' warnings and failures. The
    header counts the expected nodes (``4 nodes``, or ``4 nodes expected, 3 joined``)."""
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
    count = f"{expected} node{'s' if expected != 1 else ''}"
    if len(members) != expected:
        count += f" expected, {len(members)} joined"
    lines = [f"preflight: endpoint {endpoint}, {count}"]
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
    code = getattr(exc, "errno", None)
    resolving = isinstance(exc, (socket.gaierror, socket.herror))
    if isinstance(exc, OSError) and not resolving and isinstance(code, int) and code > 0:
        return os.strerror(code)  # asyncio says "Connect call failed (address)"
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
