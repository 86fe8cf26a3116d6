"""The agent-side mechanisms the plan chooses, each with its switch and reason (table-driven)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import pytest

from torchrun_jsc.errors import ConfigError
from torchrun_jsc.handover import VARIABLE, Handover, encode
from torchrun_jsc.plan import Plan
from torchrun_jsc.runtime.timing import HANDOVER_START
from torchrun_jsc.runtime.watch.vocabulary import Config

from .layouts import ib, node
from .planning import plan

SCRIPT = ["train.py"]
MULTI = ["--nnodes=4", "--rdzv_backend=c10d", "--rdzv_id=9", "--rdzv_endpoint=node0i:29500"]
STANDALONE = ["--standalone", "--nproc_per_node=2"]


def patches(p: Plan) -> Dict[str, Dict[str, object]]:
    return {s.name: s.data for s in p.patches}


def watch(p: Plan) -> Dict[str, Any]:
    """The job watch's settings the plan built (the ``job_watch`` patch's)."""
    config: Dict[str, Any] = patches(p)["job_watch"]["config"]  # type: ignore[assignment]
    return config


def decision(p: Plan, topic: str) -> str:
    return next(f"{d.value} ({d.reason})" for d in p.decisions if d.topic == topic)


def multi(
    i: int = 1, env: Optional[Dict[str, str]] = None, version: str = "2.13.0", **kw: str
) -> Plan:
    return plan([*MULTI, *SCRIPT], {"SLURM_NODEID": str(i), **(env or {}), **kw}, version, node(i))


def test_every_launch_gets_orphan_guard_signals_and_the_failure_report() -> None:
    p = plan([*STANDALONE, *SCRIPT])
    found = patches(p)
    assert found["worker_start"] == {"kill_orphans": True, "new_session": False}
    assert found["forward_signals"] == {"signals": ["SIGUSR1", "SIGUSR2"]}
    config = {**Config()._asdict(), "hostname": "node0", "report": True, "host_addresses": []}
    assert watch(p) == config  # this node's first failure; no store, no heartbeats
    assert "rank_order" not in found
    assert decision(p, "lost nodes").startswith("not watched (no multi-node c10d")


NODE1 = {
    **Config()._asdict(),
    "host_addresses": [],
    "hostname": "node1",
    "node_rank": 1,
    "grace": None,
    "is_host": False,
    "endpoint": "node0i:29500",
    "store_host": "node0i",
    "store_port": 29500,
    "run_id": "9",
    "elastic": False,
    "max_nodes": 4,
}


def test_a_multi_node_launch_is_watched_through_its_store() -> None:
    found = patches(multi(1))
    assert found["job_watch"] == {"config": {**NODE1, "peer_timeout": 60.0, "report": True}}
    assert found["rank_order"] == {"node_rank": 1}
    assert found["wait_for_host"] == {
        "endpoint": "node0i:29500",
        "wait": 600.0,
        "handed_over": False,
    }


@pytest.mark.parametrize(
    ("conf", "cap", "source"),
    [
        ("", 2.5, "torch's keep-alive interval, 5 s"),
        ("keep_alive_interval=2", 1.0, "keep_alive_interval=2 in --rdzv_conf"),
        ("keep_alive_interval=30", 2.5, "torch's keep-alive interval, 5 s"),
    ],
    ids=["default", "shorter", "longer"],
)
def test_a_lost_state_write_waits_at_most_half_a_keep_alive(
    conf: str, cap: float, source: str
) -> None:
    args = [*MULTI, *([f"--rdzv_conf={conf}"] if conf else []), *SCRIPT]
    p = plan(args, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert patches(p)["backoff"] == {"first": 0.05, "cap": cap}
    assert decision(p, "lost state writes").endswith(f"(at most half of {source})")


def test_a_single_node_launch_has_no_backoff() -> None:
    assert "backoff" not in patches(plan([*STANDALONE, *SCRIPT]))


def test_the_host_watches() -> None:
    p = multi(0)
    host = {**NODE1, "hostname": "node0", "node_rank": 0, "is_host": True}
    assert watch(p) == {**host, "peer_timeout": 60.0, "report": True}
    assert "this node watches every node" in decision(p, "lost nodes")
    assert "wait_for_host" not in patches(p)


@pytest.mark.parametrize(
    ("env", "absent", "topic", "words"),
    [
        (
            {"TORCHRUN_JSC_KILL_ORPHANS": "0", "TORCHRUN_JSC_FORWARD_SIGNALS": "none"},
            "worker_start",
            "orphans",
            "TORCHRUN_JSC_KILL_ORPHANS=0",
        ),
        ({"TORCHRUN_JSC_FORWARD_SIGNALS": "none"}, "forward_signals", "SIGUSR1, SIGUSR2", "none"),
        ({"TORCHRUN_JSC_WAIT_FOR_HOST": "0"}, "wait_for_host", "waiting for the host", "=0"),
        ({"TORCHRUN_JSC_RANK_ORDER": "torch"}, "rank_order", "rank order", "RANK_ORDER=torch"),
        ({"TORCHRUN_JSC_BACKOFF": "0"}, "backoff", "lost state writes", "at once"),
    ],
    ids=["orphans", "signals", "wait", "rank-order", "backoff"],
)
def test_each_mechanism_has_its_switch(
    env: Dict[str, str], absent: str, topic: str, words: str
) -> None:
    p = multi(1, env)
    assert absent not in patches(p)
    assert words in decision(p, topic)


@pytest.mark.parametrize(
    ("env", "part", "topic", "words"),
    [
        ({"TORCHRUN_JSC_PEER_TIMEOUT": "0"}, "peer_timeout", "lost nodes", "PEER_TIMEOUT=0"),
        ({"TORCHRUN_JSC_FAILURE_REPORT": "0"}, "report", "failure report", "=0"),
    ],
    ids=["peer-timeout", "report"],
)
def test_each_part_of_the_job_watch_has_its_switch(
    env: Dict[str, str], part: str, topic: str, words: str
) -> None:
    p = multi(1, env)
    assert watch(multi(1))[part] and not watch(p)[part]
    assert words in decision(p, topic)


def test_the_job_watch_is_not_installed_with_every_part_off() -> None:
    off = {"TORCHRUN_JSC_PEER_TIMEOUT": "0", "TORCHRUN_JSC_FAILURE_REPORT": "0"}
    assert "job_watch" not in patches(multi(1, off))


def test_peer_timeout_sets_the_watch() -> None:
    assert watch(multi(1, TORCHRUN_JSC_PEER_TIMEOUT="25"))["peer_timeout"] == 25.0


def test_torch_before_2_2_gets_workers_in_their_own_session() -> None:
    """So that a signal to the agent's process group (psslurm) reaches a worker only once."""
    assert patches(multi(1, version="2.1.2"))["worker_start"]["new_session"] is True
    assert patches(multi(1, version="2.2.2"))["worker_start"]["new_session"] is False
    off = multi(1, version="2.1.2", TORCHRUN_JSC_FORWARD_SIGNALS="none")
    assert patches(off)["worker_start"]["new_session"] is False


def test_signals_torch_handles_are_left_to_it() -> None:
    argv = [*MULTI, "--signals-to-handle=SIGTERM,SIGUSR1", *SCRIPT]
    p = plan(argv, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert patches(p)["forward_signals"] == {"signals": ["SIGUSR2"]}
    assert "--signals-to-handle" in decision(p, "SIGUSR1")


def test_term_grace_is_a_patch_only_when_set() -> None:
    assert "term_grace" not in patches(multi(1))
    p = multi(1, TORCHRUN_JSC_TERM_GRACE="7")
    assert patches(p)["term_grace"] == {"seconds": 7.0}
    assert watch(p)["grace"] == 7.0


def test_not_on_linux_no_worker_guard_and_no_signals() -> None:
    facts = node(1)._replace(platform="darwin")
    p = plan([*MULTI, *SCRIPT], {"SLURM_NODEID": "1"}, "2.13.0", facts)
    assert "worker_start" not in patches(p) and "forward_signals" not in patches(p)
    assert decision(p, "orphans") == "not handled (not on Linux)"


def test_elastic_launch_is_marked() -> None:
    argv = ["--nnodes=2:4", *MULTI[1:], *SCRIPT]
    p = plan(argv, {"SLURM_NODEID": "1"}, "2.13.0", node(1))
    assert watch(p)["elastic"] is True
    assert decision(p, "rank order").startswith("node rank (of the nodes present)")


@pytest.mark.parametrize(
    ("age", "conf", "wait"),
    [
        (None, "join_timeout=100", 100.0),
        (30.0, "join_timeout=100", 70.0),
        (95.0, "", 600 - 95.0),
        (99.0, "join_timeout=100,read_timeout=20", 20.0),
    ],
)
def test_a_node_waits_for_the_host_until_join_timeout_from_the_step_start(
    age: Optional[float], conf: str, wait: float
) -> None:
    extra = [f"--rdzv_conf={conf}"] if conf else []
    facts = node(1)._replace(step_age=age)
    p = plan([*MULTI, *extra, *SCRIPT], {"SLURM_NODEID": "1"}, "2.13.0", facts)
    assert patches(p)["wait_for_host"]["wait"] == wait


def test_a_late_host_waits_only_as_long_as_the_others() -> None:
    facts = node(0)._replace(step_age=200.0)
    p = plan(
        [*MULTI, "--rdzv_conf=join_timeout=600,a=b", *SCRIPT],
        {"SLURM_NODEID": "0"},
        "2.13.0",
        facts,
    )
    assert "--rdzv_conf=join_timeout=400,a=b,is_host=1" in p.added_args
    assert "started 200 s after its Slurm step" in decision(p, "join_timeout")
    too_late = node(0)._replace(step_age=590.0)
    q = plan([*MULTI, *SCRIPT], {"SLURM_NODEID": "0"}, "2.13.0", too_late)
    assert "--rdzv_conf=is_host=1,join_timeout=30" in q.added_args
    assert any("they have probably given up" in w for w in q.warnings)
    on_time = plan(
        [*MULTI, *SCRIPT], {"SLURM_NODEID": "0"}, "2.13.0", node(0)._replace(step_age=3.0)
    )
    assert "--rdzv_conf=is_host=1" in on_time.added_args


def test_rank_order_needs_a_node_rank_when_asked_for() -> None:
    no_rank = plan([*MULTI, *SCRIPT], {}, "2.13.0", node(1))
    assert "rank_order" not in patches(no_rank)
    assert "no node rank on this node" in decision(no_rank, "rank order")
    with pytest.raises(ConfigError, match="TORCHRUN_JSC_RANK_ORDER=node needs this node's rank"):
        plan([*MULTI, *SCRIPT], {"TORCHRUN_JSC_RANK_ORDER": "node"}, "2.13.0", node(1))


def test_node_rank_option_is_honoured_with_c10d() -> None:
    p = plan([*MULTI, "--node_rank=3", *SCRIPT], {}, "2.13.0", node(3))
    assert patches(p)["rank_order"] == {"node_rank": 3}
    assert p.is_host is False
    assert "node rank 3 from --node_rank" in decision(p, "rank order")
    mine = plan(
        [*MULTI, "--node_rank=3", *SCRIPT], {"TORCHRUN_JSC_NODE_RANK": "2"}, "2.13.0", node(2)
    )
    assert patches(mine)["rank_order"] == {"node_rank": 2}


def test_the_ib_address_is_still_advertised_with_rank_order() -> None:
    p = multi(2)
    assert f"--local_addr={ib(2)}" in p.added_args


def recovering(
    restarts: int, env: Optional[Dict[str, str]] = None, version: str = "2.13.0", nnodes: str = "4"
) -> Plan:
    argv = [f"--nnodes={nnodes}", *MULTI[1:], f"--max_restarts={restarts}", *SCRIPT]
    return plan(argv, {"SLURM_NODEID": "1", **(env or {})}, version, node(1))


def test_restarts_switch_recovery_on_with_the_minimum_and_the_budget() -> None:
    p = recovering(3, nnodes="3:4")
    found = patches(p)
    assert found["recovery"] == {} and found["failover"] == {}
    assert watch(p) == {
        **NODE1,
        "elastic": True,
        "peer_timeout": 60.0,
        "report": True,
        "recovery": True,
        "min_nodes": 3,
        "max_restarts": 3,
        "failover": True,
        "host_node_rank": 0,
        "host_addresses": [ib(0)],
        "address": ib(1),
        "previous": None,
    }
    assert decision(p, "after a lost node").startswith("restart without it (up to 3 times)")
    assert "or on fewer nodes down to 3" in decision(p, "after a lost node")
    assert decision(p, "rendezvous host lost").startswith("the next live node hosts")
    wait = 60.0 + 30.0 + HANDOVER_START
    assert f"that node has {wait:g} s to serve" in decision(p, "rendezvous host lost")
    assert ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1") in p.env


def test_the_others_keep_the_hosts_place_only_where_they_know_the_host() -> None:
    assert patches(recovering(3))["host_in_round"] == {}  # up to the watch's peer timeout
    shorter = recovering(3, {"TORCHRUN_JSC_PEER_TIMEOUT": "15"})
    assert "(up to 15 s)" in next(s.reason for s in shorter.patches if s.name == "host_in_round")
    assert "host_in_round" not in patches(recovering(0))
    argv = ["--nnodes=4", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    guessed = plan(argv, {"TORCHRUN_JSC_HOST_BY_ADDRESS": "0"}, "2.13.0", node(1))
    assert "host_in_round" not in patches(guessed) and "recovery" in patches(guessed)
    assert decision(guessed, "the rendezvous host's place").startswith("not kept (")


@pytest.mark.parametrize(
    ("env", "extra", "why"),
    [
        ({"TORCHRUN_JSC_FAILOVER": "0"}, [], "TORCHRUN_JSC_FAILOVER=0"),
        ({}, ["--rdzv_conf=is_host=0"], "is_host is given in --rdzv_conf"),
    ],
)
def test_failover_off_or_with_is_host_given_a_lost_host_stops_the_job(
    env: Dict[str, str], extra: List[str], why: str
) -> None:
    argv = ["--nnodes=4", *MULTI[1:], "--max_restarts=3", *extra, *SCRIPT]
    p = plan(argv, {"SLURM_NODEID": "1", **env}, "2.13.0", node(1))
    assert "recovery" in patches(p) and "failover" not in patches(p)
    assert decision(p, "rendezvous host lost").startswith(f"the job stops ({why}")


def test_without_recovery_there_is_no_failover() -> None:
    p = recovering(0)
    assert "failover" not in patches(p)
    assert "rendezvous host lost" not in [d.topic for d in p.decisions]


@pytest.mark.parametrize(
    ("lost_nodes", "host", "before"),
    [((0,), "node1", ("node0",)), ((0, 1), "node2", ("node0", "node1"))],
)
def test_after_a_handover_a_requeue_leaves_the_lost_nodes_out(
    lost_nodes: Tuple[int, ...], host: str, before: Tuple[str, ...]
) -> None:
    """The store that knew of the lost hosts is gone: the plan names their nodes."""
    handed = Handover(
        endpoint="10.78.0.12:29500",
        host_node_rank=len(lost_nodes),
        restart=len(lost_nodes),
        lost="the rendezvous host",
        wait=100.0,
        lost_nodes=lost_nodes,
    )
    env = {**STEP, "TORCHRUN_JSC_REQUEUE": "1", VARIABLE: encode(handed)}
    argv = ["--nnodes=3:4", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    p = plan(argv, {"SLURM_NODEID": "3", **env}, "2.13.0", node(3))
    budget = patches(p)["requeue"]["budget"]
    assert (budget["host"], budget["lost_before"]) == (host, before)  # type: ignore[index]
    assert decision(p, "requeue after a failure").startswith(
        f"requeued, the lost nodes and {', '.join(before)} excluded"
    )


def test_the_failover_wait_counts_the_grace_the_user_gave() -> None:
    p = recovering(3, {"TORCHRUN_JSC_TERM_GRACE": "5", "TORCHRUN_JSC_PEER_TIMEOUT": "10"})
    config = Config(**{k: v for k, v in watch(p).items() if k != "host_addresses"})
    assert config.failover_wait == 10.0 + 5.0 + HANDOVER_START
    assert "that node has 75 s to serve" in decision(p, "rendezvous host lost")


def handed(rank: Optional[int], endpoint: str = "10.78.0.11:29500", spare: bool = False) -> str:
    return encode(
        Handover(
            endpoint=endpoint,
            host_node_rank=rank,
            restart=1,
            lost="the rendezvous host node0i:29500",
            wait=100.0,
            spare=spare,
        )
    )


@pytest.mark.parametrize(("me", "hosts"), [(1, True), (2, False)])
def test_after_a_handover_the_next_host_is_elected_by_its_node_rank(me: int, hosts: bool) -> None:
    argv = ["--nnodes=4", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    env = {"SLURM_NODEID": str(me), VARIABLE: handed(1)}
    p = plan(argv, env, "2.13.0", node(me, endpoint_host=ib(1), endpoint_addresses=(ib(1),)))
    assert "--rdzv_endpoint=10.78.0.11:29500" in p.added_args
    # the added endpoint comes after the user's, so torch's parser takes it
    assert p.argv.index("--rdzv_endpoint=10.78.0.11:29500") > p.argv.index(MULTI[3])
    assert decision(p, "is_host").startswith(f"{int(hosts)} (node rank {me}")
    assert decision(p, "rendezvous handed over").startswith("node rank 1 at 10.78.0.11:29500")
    assert watch(p)["previous"]["restart"] == 1
    if hosts:
        assert "join_timeout=100" in next(a for a in p.added_args if a.startswith("--rdzv_conf"))
        assert "wait_for_host" not in patches(p)
    else:
        assert patches(p)["wait_for_host"] == {
            "endpoint": "10.78.0.11:29500",
            "wait": 100.0,
            "handed_over": True,
        }


@pytest.mark.parametrize(("nnodes", "quorum", "wanted"), [("4", 3, "4"), ("1:4", 3, "3:4")])
def test_after_a_handover_the_round_needs_a_majority_of_the_last(
    nnodes: str, quorum: int, wanted: str
) -> None:
    argv = [f"--nnodes={nnodes}", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    value = handed(1).replace('"quorum":1', f'"quorum":{quorum}')
    env = {"SLURM_NODEID": "2", VARIABLE: value}
    p = plan(argv, env, "2.13.0", node(2, endpoint_host=ib(1), endpoint_addresses=(ib(1),)))
    assert f"--nnodes={wanted}" in p.added_args
    if wanted != nnodes:  # the added one comes after the user's, so torch's parser takes it
        assert p.argv.index(f"--nnodes={wanted}") > p.argv.index(f"--nnodes={nnodes}")
    assert watch(p)["min_nodes"] == int(wanted.split(":")[0])


def test_after_a_handover_without_node_ranks_in_the_keys_the_host_is_found_by_address() -> None:
    argv = ["--nnodes=4", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    env = {"SLURM_NODEID": "1", VARIABLE: handed(None, endpoint=f"{ib(1)}:29500")}
    p = plan(argv, env, "2.13.0", node(1, endpoint_host=ib(1), endpoint_addresses=(ib(1),)))
    assert decision(p, "is_host").startswith("1 (")


@pytest.mark.parametrize(
    "value", ["{", "[]", '{"endpoint": ""}', handed(1).replace('"restart":1', '"restart":0')]
)
def test_a_broken_handover_variable_is_one_line(value: str) -> None:
    argv = ["--nnodes=4", *MULTI[1:], "--max_restarts=3", *SCRIPT]
    with pytest.raises(ConfigError, match=f"^{VARIABLE}: .*; accepted: the JSON object"):
        plan(argv, {"SLURM_NODEID": "1", VARIABLE: value}, "2.13.0", node(1))


@pytest.mark.parametrize(
    ("restarts", "env", "why"),
    [(0, {}, "--max_restarts=0"), (3, {"TORCHRUN_JSC_RECOVERY": "0"}, "TORCHRUN_JSC_RECOVERY=0")],
)
def test_without_restarts_or_with_recovery_off_a_lost_node_stops_the_job(
    restarts: int, env: Dict[str, str], why: str
) -> None:
    p = recovering(restarts, env)
    assert "recovery" not in patches(p)
    assert decision(p, "after a lost node") == f"the job stops ({why})"


def test_without_restarts_the_workers_store_is_torchs_own() -> None:
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in dict(recovering(0).env)


@pytest.mark.parametrize(
    ("version", "wanted"), [("2.2.2", True), ("2.3.1", False), ("1.13.1", True)]
)
def test_spares_wait_on_torch_before_2_3_when_restarts_are_allowed(
    version: str, wanted: bool
) -> None:
    assert ("spare_wait" in patches(recovering(3, version=version))) == wanted
    assert "spare_wait" not in patches(recovering(0, version=version))


def test_explain_counts_the_spares_of_this_step() -> None:
    step = {
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_NODES": "5",
        "SLURM_STEP_TASKS_PER_NODE": "1(x5)",
        "SLURM_STEP_NODELIST": "node[0-4]",
    }
    assert decision(recovering(3, step), "spares").startswith(
        "agents beyond 4 nodes (1 in this 5-node step)"
    )
    assert decision(recovering(3), "spares").startswith("agents beyond 4 nodes (they wait")


STEP = {
    "SLURM_JOB_ID": "12",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
    "SLURM_STEP_NODELIST": "node[0-3]",
}


def test_the_requeue_is_off_by_default() -> None:
    p = multi(1, STEP)
    assert "requeue" not in patches(p)
    assert decision(p, "requeue") == "off (TORCHRUN_JSC_REQUEUE=0)"


def test_the_requeue_gets_the_job_its_count_and_its_settings() -> None:
    env = {
        **STEP,
        "SLURM_RESTART_COUNT": "2",
        "TORCHRUN_JSC_REQUEUE": "1",
        "TORCHRUN_JSC_REQUEUE_MAX": "5",
        "TORCHRUN_JSC_REQUEUE_MIN_RUN": "60",
        "TORCHRUN_JSC_REQUEUE_GRACE": "90",
        "TORCHRUN_JSC_REQUEUE_SIGNAL": "usr2",
    }
    p = multi(1, env)
    budget = {
        "job": "12",
        "done": 2,
        "most": 5,
        "min_run": 60.0,
        "grace": 90.0,
        "signal": "SIGUSR2",
        "node_rank": 1,
        "host": "node0",  # node rank 0 of the step's node list
        "lost_before": (),
        "stop_code": 99,
    }
    assert patches(p)["requeue"] == {"budget": budget}
    events = watch(p)["events"]
    assert watch(p) == {**NODE1, "peer_timeout": 60.0, "report": True, "events": events}
    assert list(events[:4]) == ["./torchrun_jsc-12.events.jsonl", "12", 2, 4]  # run 2 of job 12
    assert decision(p, "requeue after SIGUSR2").startswith(
        "the workers have 90 s to save and end (passed on to the workers unless they got it;"
        " then one node requeues job 12"
    )
    assert decision(p, "requeue after a failure").startswith("requeued, the lost nodes excluded")
    assert decision(p, "requeues left") == (
        "3 of 5 (SLURM_RESTART_COUNT=2; by cause: a lost node or the warning whatever the"
        " run's length, a failure of the script itself not after a run shorter than 60 s"
        " (TORCHRUN_JSC_REQUEUE_MIN_RUN))"
    )
    assert decision(p, "no requeue after") == (
        "a worker's exit code 99 (TORCHRUN_JSC_REQUEUE_STOP_CODE: the script ends the chain of"
        " requeues)"
    )
    names = [s.name for s in p.patches]
    assert names.index("forward_signals") < names.index("requeue")  # it chains to that handler


def test_the_requeue_signal_not_passed_on_and_no_failure_report_are_said() -> None:
    """Not passed on where signals are not forwarded at all (not Linux): a forward list
    without the requeue's signal is refused (tests/unit/test_hostile_input.py)."""
    env = {**STEP, "TORCHRUN_JSC_REQUEUE": "1", "TORCHRUN_JSC_FAILURE_REPORT": "0"}
    p = plan(
        [*MULTI, *SCRIPT], {"SLURM_NODEID": "1", **env}, facts=node(1)._replace(platform="darwin")
    )
    assert "not passed on to the workers (TORCHRUN_JSC_FORWARD_SIGNALS)" in decision(
        p, "requeue after SIGUSR1"
    )
    assert decision(p, "requeue after a failure").startswith(
        "not requeued (TORCHRUN_JSC_FAILURE_REPORT=0)"
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TORCHRUN_JSC_REQUEUE": "1"}, "TORCHRUN_JSC_REQUEUE=1 outside a Slurm job"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_MAX": "-1"}, "TORCHRUN_JSC_REQUEUE_MAX"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_MAX": "1001"}, "an integer in 0..1000"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_SIGNAL": "TERM"}, "one of USR1, USR2"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_SIGNAL": "USR1,USR2"}, "one of USR1, USR2"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_GRACE": "soon"}, "TORCHRUN_JSC_REQUEUE_GRACE"),
        ({**STEP, "TORCHRUN_JSC_REQUEUE_MIN_RUN": "-5"}, "TORCHRUN_JSC_REQUEUE_MIN_RUN"),
    ],
)
def test_bad_requeue_settings_are_one_line_errors(env: Dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(".", r"\.")) as err:
        multi(1, env)
    assert "\n" not in str(err.value)


def test_a_store_that_never_answers_is_bounded_on_every_c10d_launch() -> None:
    """The host's own call and an undecided one (a loopback launch torchrun_jsc leaves alone)
    are store_answer's; a node told is_host=0 is wait_for_host's, installed after it."""
    host, other = multi(0), multi(1)
    assert patches(host)["store_answer"] == {"clients": True}
    assert patches(other)["store_answer"] == {"clients": False}
    names = [s.name for s in other.patches]
    assert names.index("store_answer") < names.index("wait_for_host")
    unwaited = multi(1, TORCHRUN_JSC_WAIT_FOR_HOST="0")
    assert patches(unwaited)["store_answer"] == {"clients": True}
    loopback = plan(
        ["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29500", *SCRIPT]
    )
    assert patches(loopback)["store_answer"] == {"clients": True}
    assert "store_answer" not in patches(plan([*STANDALONE, *SCRIPT])), "its port is its own"
    assert "store_answer" not in patches(plan(["--nnodes=2", "--master_addr=node0i", *SCRIPT]))


def test_store_answer_leaves_the_calls_told_is_host_0_to_wait_for_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend
    from torch.distributed.elastic.rendezvous.api import RendezvousParameters

    from torchrun_jsc import patches as patching
    from torchrun_jsc.patches import params, store_answer

    guarded: List[Any] = []

    def original(params: Any) -> Any:
        return "store"

    monkeypatch.setattr(backend, "_create_tcp_store", original)
    monkeypatch.setattr(store_answer, "answered", lambda *a: guarded.append(a[2:]) or "guarded")
    assert patching.install(params.StoreAnswer(clients=False)) is None
    try:
        client = RendezvousParameters("c10d", "node0i:29500", "r", 2, 2, is_host="0")
        assert backend._create_tcp_store(client) == "store" and guarded == []
        host = RendezvousParameters("c10d", "node0i:29500", "r", 2, 2, read_timeout="7")
        assert backend._create_tcp_store(host) == "guarded"
        assert guarded == [("node0i:29500", 7, 600)]
    finally:
        patching.restore_all()


def test_the_requeue_alone_keeps_the_job_watch_it_is_part_of() -> None:
    """The requeue reads the job through the watch (its store, its members, who serves): with
    heartbeats and the report off, the watch is still installed, and first."""
    off = {
        "TORCHRUN_JSC_PEER_TIMEOUT": "0",
        "TORCHRUN_JSC_FAILURE_REPORT": "0",
        "TORCHRUN_JSC_EVENTS": "none",
    }
    p = multi(1, {**STEP, "TORCHRUN_JSC_REQUEUE": "1", **off})
    assert watch(p) == NODE1  # neither heartbeats, nor the report, nor the event log
    names = [s.name for s in p.patches]
    assert names.index("job_watch") < names.index("requeue")


# ---------------------------------------------------------------------------- the event log


@pytest.mark.parametrize(
    ("env", "path", "reason"),
    [
        (
            {**STEP, "SLURM_SUBMIT_DIR": "/home/me/run/"},
            "/home/me/run/torchrun_jsc-12.events.jsonl",
            "in the job's submit directory; the rendezvous host appends to it",
        ),
        (STEP, "./torchrun_jsc-12.events.jsonl", "in the job's submit directory;"),
        (
            {**STEP, "TORCHRUN_JSC_EVENTS": "/scratch/ev.jsonl"},
            "/scratch/ev.jsonl",
            "TORCHRUN_JSC_EVENTS;",
        ),
        (
            {**STEP, "TORCHRUN_JSC_EVENTS": "/scratch/logs/"},
            "/scratch/logs/torchrun_jsc-12.events.jsonl",
            "TORCHRUN_JSC_EVENTS names a folder;",
        ),
        (  # outside Slurm, named after the rendezvous id
            {"TORCHRUN_JSC_EVENTS": "logs/"},
            "logs/torchrun_jsc-9.events.jsonl",
            "TORCHRUN_JSC_EVENTS names a folder;",
        ),
    ],
)
def test_the_event_log_goes_where_the_settings_and_slurm_say(
    env: Dict[str, str], path: str, reason: str
) -> None:
    p = multi(0, env)
    assert decision(p, "event log").startswith(f"{path} ({reason}")
    target = watch(p)["events"]
    assert target[0] == path
    launch = dict(target[4])
    assert launch["torch"] == "2.13.0" and launch["nnodes"] == "4"
    assert launch["nodes"] == 4 and target[3] == 4


def test_an_existing_folder_is_a_folder_without_its_slash() -> None:
    env = {**STEP, "TORCHRUN_JSC_EVENTS": "/scratch/logs"}
    p = plan(
        [*MULTI, *SCRIPT],
        {"SLURM_NODEID": "0", **env},
        "2.13.0",
        node(0)._replace(events_folder=True),
    )
    assert watch(p)["events"][0] == "/scratch/logs/torchrun_jsc-12.events.jsonl"


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        (MULTI, {**STEP, "TORCHRUN_JSC_EVENTS": "NONE"}, "TORCHRUN_JSC_EVENTS=none"),
        (MULTI, {}, "not a Slurm job; TORCHRUN_JSC_EVENTS=FILE writes one"),
        (
            STANDALONE,
            {**STEP, "TORCHRUN_JSC_EVENTS": "/tmp/e.jsonl"},
            "no multi-node c10d rendezvous host to write it",
        ),
    ],
)
def test_the_event_log_is_off_and_says_why(argv: List[str], env: Dict[str, str], why: str) -> None:
    p = plan([*argv, *SCRIPT], {"SLURM_NODEID": "0", **env}, "2.13.0", node(0))
    assert decision(p, "event log") == f"off ({why})"
    assert "job_watch" not in patches(p) or watch(p)["events"] is None


@pytest.mark.parametrize("value", ["a\nb", "x" * 4097])
def test_a_bad_event_log_path_is_one_line(value: str) -> None:
    from torchrun_jsc.settings.table import Settings

    with pytest.raises(ConfigError, match=r"^TORCHRUN_JSC_EVENTS") as caught:
        Settings.from_env({"TORCHRUN_JSC_EVENTS": value})
    assert "a file, a folder (the file is made in it), or none" in str(caught.value)
