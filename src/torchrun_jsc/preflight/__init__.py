"""``TORCHRUN_JSC_PREFLIGHT=1``: check the whole job within seconds, launch nothing.

Every node is a client (:mod:`.client`); a node that considers itself host also runs a
collector (:mod:`.collector`) on the rendezvous endpoint's port. The wire format is
:mod:`.wire`; the verdict and the table are pure (:mod:`.report`).

1. client -> collector ``hello`` (protocol, rdzv id, this node's report: hostname, node rank,
   is_host, advertised address, probe port, interface, plan warnings and predicted failures);
   collector -> client ``joined`` (id, expected node count) or ``reject``.
2. When the expected nodes have joined (or at the deadline): collector -> every client
   ``peers``; each client connects to the probe port of the peers it is given (on their
   advertised addresses) and answers ``probes`` (peer id -> error).
3. collector -> every client ``verdict``; the collector's node prints the per-node table.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from typing import List, Optional, TextIO, Tuple

from .. import network
from ..plan import Prepared
from ..slurm import expand_hostlist
from .client import ClientOutcome, NodeConfig, _serve_and_close, probe_listener, run_client
from .collector import RESULTS_GRACE, SEND_GRACE, Collector, endpoint_listener
from .report import NodeReport, Verdict, describe_error, expected_nodes


def run_node(config: NodeConfig, out: TextIO) -> int:
    """This node's whole preflight; prints to ``out``; 0 when the job-wide verdict is OK."""
    started = time.monotonic()
    deadline = started + config.timeout
    report = config.report
    stop = threading.Event()
    if report.address is not None:
        try:
            listener = probe_listener(report.address)
        except OSError as exc:
            report = replace(
                report,
                failures=(
                    *report.failures,
                    f"cannot listen on its advertised address {report.address} "
                    f"({describe_error(exc)})",
                ),
            )
        else:
            report = replace(report, probe_port=int(listener.getsockname()[1]))
            threading.Thread(target=_serve_and_close, args=(listener, stop), daemon=True).start()
    collected: List[Optional[Tuple[Verdict, str]]] = []
    collector_thread: Optional[threading.Thread] = None
    host_problem: Optional[str] = None
    if report.is_host:
        ipv6 = any(network.family_of(a) == 6 for a in config.endpoint_addresses)
        try:
            server = endpoint_listener(config.port, ipv6, config.listen_address)
        except OSError as exc:
            host_problem = (
                f"{report.hostname} considers itself host but cannot listen on port "
                f"{config.port} ({describe_error(exc)})"
            )
        else:
            collector = Collector(
                server, config.rdzv_id, config.expected, config.endpoint, config.names_by_rank
            )
            collector_thread = threading.Thread(
                target=lambda: collected.append(collector.run(deadline, stop)), daemon=True
            )
            collector_thread.start()
    client = run_client(replace(config, report=report), deadline)
    stop.set()
    if collector_thread is not None:
        collector_thread.join(config.timeout + RESULTS_GRACE + 2 * SEND_GRACE)
        if collected and collected[0] is None:
            host_problem = (
                f"{report.hostname} considers itself host, but its listener on port "
                f"{config.port} got no connection: the endpoint {config.endpoint} "
                f"({', '.join(config.endpoint_addresses)}) is not this node"
            )
    result = collected[0] if collected else None
    return _print_outcome(config, report, client, result, host_problem, started, out)


def _print_outcome(
    config: NodeConfig,
    report: NodeReport,
    client: ClientOutcome,
    result: Optional[Tuple[Verdict, str]],
    host_problem: Optional[str],
    started: float,
    out: TextIO,
) -> int:
    name = report.hostname or "this node"
    ok = True
    lines: List[str] = []
    if result is not None:
        verdict, table = result
        lines += [table, verdict.line]
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
    out.write("\n".join(lines) + "\n")
    out.flush()
    return 0 if ok else 1


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
    )


def run_preflight(prepared: Prepared) -> int:
    """Check the whole job instead of launching; 0 when every node is fine, else 1."""
    try:
        config = node_config(prepared)
    except LookupError as exc:
        print(f"preflight: OK: nothing to check across nodes: {exc}", flush=True)
        return 0
    return run_node(config, sys.stdout)
