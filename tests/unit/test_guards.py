"""The guards, by tables: one mapping from findings to outcomes, one channel for the verdict
(``Plan.problems``), and multi-node launches whose agents can never meet."""

from __future__ import annotations

from typing import Dict, List, Optional

import pytest

from torchrun_jsc import guards
from torchrun_jsc.explain import render
from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.plan import Plan, Prepared, make_plan
from torchrun_jsc.settings.table import Settings

from .layouts import ib, mgmt, node
from .planning import request
from .test_slurm_auto import SCRIPT, step_env

MULTI = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_endpoint=node0i:29500", *SCRIPT]
TWO = ["--nnodes=2", "--rdzv_backend=c10d"]
WARN = {"TORCHRUN_JSC_GUARDS": "warn"}
OUTSIDE_SRUN = {
    k: v
    for k, v in step_env().items()
    if k not in ("SLURM_STEP_ID", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST")
}


def two_node_step(**extra: str) -> Dict[str, str]:
    return step_env(node_id=1, nodes=2, tasks="1(x2)", **extra)


def planned(
    argv: List[str], env: Dict[str, str], facts: Optional[NodeFacts] = None, version: str = "2.13.0"
) -> Plan:
    return make_plan(request(argv, env), version, facts or node(1))


@pytest.mark.parametrize(
    ("kind", "setting", "outcome", "message"),
    [
        ("stop", "stop", "refused", "m; TORCHRUN_JSC_GUARDS=warn launches anyway"),
        ("stop", "warn", "warn", "m"),
        ("fail", "stop", "fail", "m"),
        ("fail", "warn", "fail", "m"),
        ("warn", "stop", "warn", "m"),
        ("warn", "warn", "warn", "m"),
    ],
)
def test_one_mapping_from_findings_to_outcomes(
    kind: str, setting: str, outcome: str, message: str
) -> None:
    settings = Settings.from_env({"TORCHRUN_JSC_GUARDS": setting})
    assert guards.outcome(guards.Finding(kind, "m"), settings) == (outcome, message)


# Launches -> (verdict, the words of the problem or warning that says why, where they land).
VERDICTS = [
    ("good", MULTI, step_env(), None, "ok", None, None),
    (
        "tasks-per-node",
        MULTI,
        step_env(tasks="2(x4)"),
        None,
        "refused",
        "2 Slurm tasks on this node would each start a torchrun agent",
        "refusal",
    ),
    (
        "tasks-per-node-warn",
        MULTI,
        step_env(tasks="2(x4)", **WARN),
        None,
        "ok",
        "2 Slurm tasks on this node would each start a torchrun agent",
        "warning",
    ),
    (
        "outside-srun",
        MULTI,
        OUTSIDE_SRUN,
        None,
        "refused",
        "started outside srun in a 4-node allocation",
        "refusal",
    ),
    (
        "single-node-in-step",
        ["--nnodes=1", *SCRIPT],
        step_env(),
        None,
        "ok",
        "4 independent jobs will run",
        "warning",
    ),
    (
        "spares-without-restarts",
        MULTI,
        step_env(nodes=5, tasks="1(x5)"),
        None,
        "ok",
        "this Slurm step spans 5 nodes for --nnodes=4: 1 of them will wait as spares, but with"
        " --max_restarts=0 a lost node stops the job",
        "warning",
    ),
    (
        "spares-with-restarts",
        ["--max_restarts=3", *MULTI],
        step_env(nodes=5, tasks="1(x5)"),
        None,
        "ok",
        None,
        None,
    ),
    (
        "spares-without-recovery",
        ["--max_restarts=3", *MULTI],
        step_env(nodes=5, tasks="1(x5)", TORCHRUN_JSC_RECOVERY="0"),
        None,
        "ok",
        "but with recovery off (TORCHRUN_JSC_RECOVERY=0) a lost node stops the job",
        "warning",
    ),
    (
        "gloo-ifname",
        MULTI,
        step_env(GLOO_SOCKET_IFNAME="mgmt"),
        None,
        "fail",
        "GLOO_SOCKET_IFNAME=mgmt does not select ib",
        "failure",
    ),
    (
        "nccl-ifname",
        MULTI,
        step_env(NCCL_SOCKET_IFNAME="mg"),
        None,
        "ok",
        "NCCL_SOCKET_IFNAME=mg does not select ib",
        "warning",
    ),
    (
        "host-without-the-endpoint",
        MULTI,
        step_env(node_id=0),
        node(0, endpoint_addresses=(ib(1),)),
        "fail",
        "this node would host the rendezvous store, but the endpoint node0i",
        "failure",
    ),
    (
        "endpoint-node-not-host",
        MULTI,
        step_env(node_id=1),
        node(1, endpoint_addresses=(ib(1),)),
        "fail",
        "the endpoint node0i is an address of this node, but this node will not host the store"
        " (node rank 1 (from SLURM_NODEID) != host node rank 0); set"
        " TORCHRUN_JSC_HOST_NODE_RANK=1",
        "failure",
    ),
    (
        "no-route",
        MULTI,
        step_env(),
        node(1, routable=False),
        "fail",
        f"no route from this node to the endpoint ({ib(0)})",
        "failure",
    ),
    (
        "store-host-backlog",
        MULTI,
        step_env(node_id=0),
        node(0)._replace(somaxconn=2),
        "ok",
        "net.core.somaxconn=2 on this node",
        "warning",
    ),
    (
        "does-not-resolve",
        MULTI,
        step_env(),
        node(1, resolve_error="Name or service not known"),
        "error",
        "--rdzv_endpoint host 'node0i' does not resolve on node1",
        "error",
    ),
]


@pytest.mark.parametrize(
    ("argv", "env", "facts", "verdict", "words", "where"),
    [row[1:] for row in VERDICTS],
    ids=[row[0] for row in VERDICTS],
)
def test_every_problem_travels_in_the_plans_problems(
    argv: List[str],
    env: Dict[str, str],
    facts: Optional[NodeFacts],
    verdict: str,
    words: Optional[str],
    where: Optional[str],
) -> None:
    p = planned(argv, env, facts)
    assert p.verdict == verdict
    places = {
        "refusal": [p.refusal] if p.refusal else [],
        "failure": list(p.predicted_failures),
        "error": [p.error] if p.error else [],
        "warning": list(p.warnings),
    }
    found = [place for place, texts in places.items() if any(words in t for t in texts)]
    assert found == ([] if where is None else [where])
    problems = places["refusal"] + places["failure"] + places["error"]
    assert sorted(pr.message for pr in p.problems) == sorted(problems), "one channel"
    assert (p.problems == ()) is (verdict == "ok")


def test_guards_run_once_per_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[int] = []
    original = guards.findings

    def counted(*args: object) -> List[guards.Finding]:
        calls.append(1)
        return original(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(guards, "findings", counted)
    planned(MULTI, step_env(GLOO_SOCKET_IFNAME="mgmt", tasks="2(x4)"))
    assert len(calls) == 1


def test_is_host_is_read_once_by_the_request() -> None:
    found = request(["--rdzv_conf=is_host=Yes", *MULTI], step_env())
    assert found.is_host is True
    p = make_plan(found._replace(is_host=False), "2.13.0", node(1))
    assert p.is_host is False, "the plan uses the request's value, not the text"


# ----------------------------------------------------------------------------- can never meet

STANDALONE_WORDS = "--standalone with --nnodes=2 can never start"
LOOPBACK_WORDS = "in a 2-node Slurm step: the agents of the other nodes cannot reach"

# (id, argv, env, verdict, words or None)
SHAPES = [
    (
        "standalone-nnodes-2",
        ["--standalone", "--nnodes=2", *SCRIPT],
        {},
        "refused",
        STANDALONE_WORDS,
    ),
    (
        "standalone-nnodes-2-in-step",
        ["--standalone", "--nnodes=2", *SCRIPT],
        two_node_step(),
        "refused",
        STANDALONE_WORDS,
    ),
    ("standalone-nnodes-1-2", ["--standalone", "--nnodes=1:2", *SCRIPT], {}, "ok", None),
    (
        "standalone-nnodes-2-warn",
        ["--standalone", "--nnodes=2", *SCRIPT],
        WARN,
        "ok",
        STANDALONE_WORDS,
    ),
    (
        "localhost-in-2-node-step",
        [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT],
        two_node_step(),
        "refused",
        "--nnodes=2 with --rdzv_endpoint=localhost:29400 " + LOOPBACK_WORDS,
    ),
    (
        "loopback4-in-2-node-step",
        [*TWO, "--rdzv_endpoint=127.0.0.1:29400", *SCRIPT],
        two_node_step(),
        "refused",
        LOOPBACK_WORDS,
    ),
    (
        "loopback6-in-2-node-step",
        [*TWO, "--rdzv_endpoint=[::1]:29400", *SCRIPT],
        two_node_step(),
        "refused",
        LOOPBACK_WORDS,
    ),
    (
        "no-endpoint-in-2-node-step",
        [*TWO, *SCRIPT],
        two_node_step(),
        "refused",
        "--nnodes=2 with no --rdzv_endpoint (torch uses localhost) " + LOOPBACK_WORDS,
    ),
    (
        "static-default-in-2-node-step",
        ["--nnodes=2", *SCRIPT],
        two_node_step(),
        "refused",
        "with the static rendezvous on --master_addr=127.0.0.1 " + LOOPBACK_WORDS,
    ),
    (
        "static-master-addr-in-2-node-step",
        ["--nnodes=2", "--master_addr=node0i", *SCRIPT],
        two_node_step(),
        "ok",
        None,
    ),
    (
        "localhost-in-2-node-step-warn",
        [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT],
        two_node_step(**WARN),
        "ok",
        LOOPBACK_WORDS,
    ),
    (
        "localhost-tasks-unknown",
        [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT],
        {k: v for k, v in two_node_step().items() if k != "SLURM_STEP_TASKS_PER_NODE"},
        "fail",
        LOOPBACK_WORDS,
    ),
    ("localhost-no-slurm", [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT], {}, "ok", None),
    (
        "localhost-one-node-step",
        [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT],
        step_env(node_id=0, nodes=1, tasks="1"),
        "ok",
        None,
    ),
    (
        "localhost-elastic-1-2-in-step",
        ["--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400", *SCRIPT],
        two_node_step(),
        "ok",
        None,
    ),
    (
        "endpoint-node-in-2-node-step",
        [*TWO, "--rdzv_endpoint=node0i:29400", *SCRIPT],
        two_node_step(),
        "ok",
        None,
    ),
]


@pytest.mark.parametrize(
    ("argv", "env", "verdict", "words"),
    [row[1:] for row in SHAPES],
    ids=[row[0] for row in SHAPES],
)
def test_launches_that_can_never_form(
    argv: List[str], env: Dict[str, str], verdict: str, words: Optional[str]
) -> None:
    p = planned(argv, env, node(1, endpoint_addresses=(ib(0),)))
    assert p.verdict == verdict
    said = [m for m in (*p.warnings, *(pr.message for pr in p.problems)) if "waits alone" in m]
    if words is None:
        assert said == []
        return
    assert len(said) == 1 and words in said[0], said
    assert "each node waits alone until join_timeout (600 s)" in said[0]
    assert "\n" not in said[0]
    if verdict == "refused":
        assert p.refusal == said[0] and said[0].endswith(
            "; TORCHRUN_JSC_GUARDS=warn launches anyway"
        )
    elif verdict == "fail":
        assert p.predicted_failures == (said[0],)
    else:
        assert said[0] in p.warnings


@pytest.mark.parametrize(
    ("addresses", "verdict"),
    [(("127.0.1.1",), "refused"), (("::1", "127.0.0.1"), "refused"), (("127.0.0.1", ib(0)), "ok")],
    ids=["etc-hosts-loopback", "both-families", "also-a-real-address"],
)
def test_an_endpoint_name_that_resolves_to_loopback_here_is_refused_in_a_multi_node_step(
    addresses: tuple[str, ...], verdict: str
) -> None:
    """A name in ``/etc/hosts`` for 127.0.x.x is the loopback as surely as ``localhost``."""
    p = planned(
        [*TWO, "--rdzv_endpoint=trainhost:29400", *SCRIPT],
        two_node_step(),
        node(1, endpoint_host="trainhost", endpoint_addresses=addresses),
    )
    assert p.verdict == verdict, (p.refusal, p.problems)
    if verdict == "refused":
        assert p.refusal is not None and p.refusal.startswith(
            f"--nnodes=2 with --rdzv_endpoint=trainhost:29400 (it resolves to"
            f" {', '.join(addresses)} here) {LOOPBACK_WORDS}"
        ), p.refusal
        text = render(
            Prepared(
                request([*TWO, "--rdzv_endpoint=trainhost:29400", *SCRIPT], two_node_step()),
                node(1),
                p,
            ),
            "text",
        )
        assert text.endswith("verdict: refused")


def test_the_loopback_fix_names_the_first_node() -> None:
    p = planned([*TWO, *SCRIPT], two_node_step())
    assert p.refusal is not None
    assert (
        "give every node the same --rdzv_endpoint naming one node of the step (such as node0,"
        in (p.refusal)
    )


def test_several_agents_on_one_node_are_the_tasks_guards() -> None:
    """Two tasks on the node could meet on its loopback: the tasks guard says what is wrong."""
    p = planned(
        [*TWO, "--rdzv_endpoint=localhost:29400", *SCRIPT], step_env(nodes=2, tasks="2(x2)")
    )
    assert p.refusal is not None and p.refusal.startswith("2 Slurm tasks on this node")
    assert not any("waits alone" in m for m in (*p.warnings, *(pr.message for pr in p.problems)))


@pytest.mark.parametrize(
    ("argv", "env", "label"),
    [
        (["--standalone", "--nnodes=2", *SCRIPT], {}, "REFUSED"),
        (
            [*TWO, *SCRIPT],
            {k: v for k, v in two_node_step().items() if k != "SLURM_STEP_TASKS_PER_NODE"},
            "WILL FAIL",
        ),
    ],
    ids=["refused", "will-fail"],
)
def test_explain_says_it_with_the_same_words(
    argv: List[str], env: Dict[str, str], label: str
) -> None:
    found = request(argv, env)
    facts = node(1)
    p = make_plan(found, "2.13.0", facts)
    text = render(Prepared(found, facts, p), "text")
    message = p.refusal or p.predicted_failures[0]
    assert f"  {label}: {message}" in text.splitlines()
    assert text.splitlines()[-1] == f"  verdict: {'refused' if label == 'REFUSED' else 'fail'}"


def test_mgmt_is_not_loopback() -> None:
    """A name of this node on another network is not this machine's loopback."""
    p = planned([*TWO, f"--rdzv_endpoint={mgmt(0)}:29400", *SCRIPT], two_node_step())
    assert not any("waits alone" in m for m in (*p.warnings, *(pr.message for pr in p.problems)))
