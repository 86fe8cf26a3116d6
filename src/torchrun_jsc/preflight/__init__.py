"""``TORCHRUN_JSC_PREFLIGHT=1``: check the whole job within seconds, launch nothing.

Every node is a client (:mod:`.client`) with a probe port; a node that considers itself host
also runs a collector (:mod:`.collector`) on the rendezvous endpoint's port. The wire format
is :mod:`.wire`; the verdict and the table are pure (:mod:`.report`), and so is which peers each
node probes (:mod:`.assign`). Everything of a node runs on one asyncio event loop.

1. client -> collector ``hello`` (protocol, rdzv id, this node's report: hostname, node rank,
   is_host, advertised address, probe port, interface, plan warnings and predicted failures);
   collector -> client ``joined`` (id, expected node count) or ``reject``.
2. When the expected nodes have joined (or at the deadline): collector -> every client
   ``peers``, only the few peers this node probes (:func:`.assign.assign_probes`); each client
   connects to their probe ports (on their advertised addresses) and answers ``probes``
   (peer id -> error).
3. collector -> every client ``verdict``; the collector's node prints the per-node table.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, replace
from typing import List, Optional, TextIO, Tuple

from .. import network
from ..facts import read_somaxconn
from ..plan import Prepared
from ..slurm import expand_hostlist
from .assign import MAX_PROBES, assign_probes, probe_offsets, probe_targets, probers_of
from .client import ClientOutcome, NodeConfig, ProbeServer, probe_listener, run_client
from .collector import RESULTS_GRACE, SEND_GRACE, Collector, endpoint_listener, listen_backlog
from .report import NodeReport, Verdict, describe_error, expected_nodes

__all__ = [
    "MAX_PROBES",
    "NodeConfig",
    "NodeResult",
    "assign_probes",
    "node_config",
    "probe_offsets",
    "probe_targets",
    "probers_of",
    "run_node",
    "run_node_async",
    "run_preflight",
]


@dataclass
class NodeResult:
    """One node's preflight: its exit code, what it prints, and counts for benchmarks."""

    code: int
    text: str
    client: ClientOutcome
    verdict: Optional[Verdict] = None
    #: The collector's accepted connections (None: this node ran none).
    collector_accepted: Optional[int] = None
    #: Connections this node's probe port accepted (None: it had none).
    probes_accepted: Optional[int] = None


def run_node(config: NodeConfig, out: TextIO) -> int:
    """This node's whole preflight; prints to ``out``; 0 when the job-wide verdict is OK."""
    result = asyncio.run(run_node_async(config))
    out.write(result.text)
    out.flush()
    return result.code


async def run_node_async(config: NodeConfig) -> NodeResult:
    """:func:`run_node` on the running event loop, printing nothing (many nodes can share a
    loop: the loopback benchmark runs thousands in a few processes)."""
    started = time.monotonic()
    deadline = started + config.timeout
    report = config.report
    stop = asyncio.Event()
    somaxconn = config.somaxconn if config.somaxconn is not None else read_somaxconn()
    backlog = listen_backlog(config.expected, somaxconn)
    probes: Optional[ProbeServer] = None
    if report.address is not None:
        try:
            probes = ProbeServer(probe_listener(report.address, backlog), backlog)
            await probes.start()
        except OSError as exc:
            if probes is not None:
                probes.close()
                probes = None
            report = replace(
                report,
                failures=(
                    *report.failures,
                    f"cannot listen on its advertised address {report.address} "
                    f"({describe_error(exc)})",
                ),
            )
        else:
            report = replace(report, probe_port=probes.port)
    collector: Optional[Collector] = None
    collecting: Optional[asyncio.Task[Optional[Tuple[Verdict, str]]]] = None
    host_problem: Optional[str] = None
    if report.is_host:
        ipv6 = any(network.family_of(a) == 6 for a in config.endpoint_addresses)
        try:
            server = endpoint_listener(config.port, ipv6, config.listen_address, backlog)
        except OSError as exc:
            host_problem = (
                f"{report.hostname} considers itself host but cannot listen on port "
                f"{config.port} ({describe_error(exc)})"
            )
        else:
            collector = Collector(
                server,
                config.rdzv_id,
                config.expected,
                config.endpoint,
                config.names_by_rank,
                backlog,
            )
            await collector.start()
            collecting = asyncio.ensure_future(collector.run(deadline, stop))
    try:
        client = await run_client(replace(config, report=report), deadline)
        stop.set()
        result: Optional[Tuple[Verdict, str]] = None
        if collector is not None and collecting is not None:
            try:
                result = await asyncio.wait_for(
                    collecting, config.timeout + RESULTS_GRACE + 2 * SEND_GRACE
                )
            except asyncio.TimeoutError:
                host_problem = f"its collector on port {config.port} did not finish in time"
            else:
                if result is None:
                    host_problem = _no_join(config, report, client, collector)
    finally:
        if collector is not None:
            collector.close()
        if probes is not None:
            probes.close()
    code, text = _print_outcome(config, report, client, result, host_problem, started)
    return NodeResult(
        code,
        text,
        client,
        None if result is None else result[0],
        None if collector is None else collector.accepted,
        None if probes is None else probes.accepted,
    )


def _no_join(
    config: NodeConfig, report: NodeReport, client: ClientOutcome, collector: Collector
) -> str:
    """Why nobody joined this host's collector: the endpoint is another node only when this
    node's own client was answered by a collector and this one heard no hello at all."""
    if client.answered and collector.hellos == 0:
        return (
            f"{report.hostname} considers itself host, but its listener on port "
            f"{config.port} got no connection: the endpoint {config.endpoint} "
            f"({', '.join(config.endpoint_addresses)}) is not this node (a collector there "
            "answered this node)"
        )
    text = (
        f"{report.hostname} considers itself host, but no node joined its collector on port "
        f"{config.port} within {config.timeout:g} s"
    )
    if config.port == 0:
        text += " (the endpoint's port is 0: no node can connect to it)"
    return text


def _print_outcome(
    config: NodeConfig,
    report: NodeReport,
    client: ClientOutcome,
    result: Optional[Tuple[Verdict, str]],
    host_problem: Optional[str],
    started: float,
) -> Tuple[int, str]:
    name = report.hostname or "this node"
    ok = True
    lines: List[str] = []
    if result is not None:
        verdict, table = result
        lines.append(table)
        if verdict.truncated:
            lines += [f"  FAIL: {reason}" for reason in verdict.reasons]
        lines.append(verdict.line)
        ok = verdict.ok
    else:
        unreachable = ", ".join(
            client.peer_names.get(k, f"#{k}") for k in sorted(client.unreachable)
        )
        summary = (
            f"preflight on {name}: node rank "
            f"{'-' if report.node_rank is None else report.node_rank}, is_host "
            f"{ {True: 1, False: 0, None: '?'}[report.is_host] }, address "
            f"{report.address or '-'} ({report.interface or '-'}), endpoint {config.endpoint} "
            f"{'reached' if client.reached else 'NOT reached'}, peers unreachable: "
            f"{(unreachable or 'none') if client.probed else 'not probed'} "
            f"({time.monotonic() - started:.1f} s)"
        )
        lines.append(summary)
        if client.line is not None:
            lines.append(f"job verdict: {client.line}")
            ok = client.ok is True
        elif client.problem is None:
            client.problem = "no verdict arrived"
    problems = [p for p in (host_problem, client.problem) if p is not None]
    if problems:
        ok = False
        lines.append("preflight: FAIL: " + "; ".join(f"{name}: {p}" for p in problems))
    return (0 if ok else 1), "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- entry point


def names_by_rank(prepared: Prepared) -> Tuple[str, ...]:
    """Host names by node rank (the Slurm step's nodelist), to name nodes that never joined."""
    request = prepared.request
    step = request.slurm
    if request.node_rank_source != "SLURM_NODEID" or step is None or step.nodelist is None:
        return ()
    return tuple(expand_hostlist(step.nodelist))


def node_config(prepared: Prepared) -> NodeConfig:
    """This node's :class:`NodeConfig`; raises ``LookupError`` (with the reason) when the
    command line has no multi-node c10d rendezvous to check. Reads the request, so it checks
    the command line torchrun would get (Slurm auto-configuration included)."""
    request, facts, plan = prepared.request, prepared.facts, prepared.plan
    if request.options is None:
        raise LookupError("torchrun does not accept this command line")
    if request.untouched is not None or request.endpoint is None:
        raise LookupError(
            f"no c10d rendezvous endpoint to check ({request.untouched or 'none given'})"
        )
    endpoint = request.endpoint
    if endpoint.is_loopback or facts.endpoint_host is None:
        raise LookupError(f"the endpoint {endpoint.text} is this machine's loopback")
    warnings = list(plan.warnings)
    if plan.is_host is None:
        warnings.append("is_host is left to torch's guess; the preflight counts it as not host")
    report = NodeReport(
        hostname=facts.hostname,
        node_rank=request.node_rank,
        is_host=plan.is_host,
        address=plan.advertised_address,
        interface=plan.interface,
        warnings=tuple(warnings),
        failures=tuple(plan.predicted_failures),
    )
    options = request.options
    step_nodes = request.slurm.num_nodes if request.slurm is not None else None
    return NodeConfig(
        report=report,
        endpoint=endpoint.text,
        endpoint_addresses=facts.endpoint_addresses,
        port=endpoint.port_or_default,
        rdzv_id=options.rdzv_id,
        expected=expected_nodes(options.min_nodes, options.max_nodes, step_nodes),
        timeout=request.settings.preflight_timeout,
        names_by_rank=names_by_rank(prepared),
        somaxconn=facts.somaxconn,
    )


def run_preflight(prepared: Prepared) -> int:
    """Check the whole job instead of launching; 0 when every node is fine, else 1."""
    try:
        config = node_config(prepared)
    except LookupError as exc:
        print(f"preflight: OK: nothing to check across nodes: {exc}", flush=True)
        return 0
    return run_node(config, sys.stdout)
