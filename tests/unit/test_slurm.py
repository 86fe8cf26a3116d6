"""Tests for torchrun_jsc.slurm: hostlists, the step environment, rendezvous port and id."""

from __future__ import annotations

import re
from typing import Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchrun_jsc.errors import ConfigError
from torchrun_jsc.slurm import (
    MAX_HOSTS,
    PORT_BASE,
    PORT_SPAN,
    HostlistError,
    SlurmStep,
    expand_hostlist,
    first_host,
    rendezvous_id,
    rendezvous_port,
)

# --------------------------------------------------------------------------- expand_hostlist

EXPAND_CASES = [
    pytest.param("", [], id="empty"),
    pytest.param("node1", ["node1"], id="plain"),
    pytest.param("a-b.c", ["a-b.c"], id="dash-dot"),
    pytest.param("login.cluster-1.example.org", ["login.cluster-1.example.org"], id="fqdn"),
    pytest.param("n1,n3,m2", ["n1", "n3", "m2"], id="plain-list"),
    pytest.param("lx[10-20]", [f"lx{i}" for i in range(10, 21)], id="man-lx10-20"),
    pytest.param(
        "linux[0-64,128]", [f"linux{i}" for i in range(65)] + ["linux128"], id="man-linux0-64,128"
    ),
    pytest.param("tux[2,1-2]", ["tux2", "tux1", "tux2"], id="man-duplicates-kept"),
    pytest.param("tux[1-3]", ["tux1", "tux2", "tux3"], id="man-tux1-3"),
    pytest.param("node[01-10]", [f"node{i:02d}" for i in range(1, 11)], id="padded"),
    pytest.param("node[001-003]", ["node001", "node002", "node003"], id="padded-3"),
    pytest.param("n[8-10]", ["n8", "n9", "n10"], id="unpadded-grows"),
    pytest.param("n[1-010]", [f"n{i}" for i in range(1, 11)], id="width-from-lower-bound"),
    pytest.param("n[098-101]", ["n098", "n099", "n100", "n101"], id="padded-grows"),
    pytest.param("n[5]", ["n5"], id="single-in-brackets"),
    pytest.param("n[007]", ["n007"], id="single-padded"),
    pytest.param("n[1,3-5,10]", ["n1", "n3", "n4", "n5", "n10"], id="mixed-list-range"),
    pytest.param("n[3-3]", ["n3"], id="one-element-range"),
    pytest.param("jwb[0001-0004]", [f"jwb{i:04d}" for i in range(1, 5)], id="jsc-juwels-booster"),
    pytest.param(
        "jrc[0100-0102,0200]", ["jrc0100", "jrc0101", "jrc0102", "jrc0200"], id="jsc-jureca"
    ),
    pytest.param("jwb[0001-0002]i", ["jwb0001i", "jwb0002i"], id="suffix-after-brackets"),
    pytest.param(
        "jwb[0001-0002].ib.example",
        ["jwb0001.ib.example", "jwb0002.ib.example"],
        id="domain-suffix",
    ),
    pytest.param(
        "rack[0-1]node[0-2]",
        ["rack0node0", "rack0node1", "rack0node2", "rack1node0", "rack1node1", "rack1node2"],
        id="man-multi-dimensional",
    ),
    pytest.param(
        "rack[1-2]-node[01-02]",
        ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"],
        id="two-groups-slurm-order",
    ),
    pytest.param(
        "a[1-2]b[3,5]c[7]",
        ["a1b3c7", "a1b5c7", "a2b3c7", "a2b5c7"],
        id="three-groups",
    ),
    pytest.param("[1-3]", ["1", "2", "3"], id="no-prefix"),
    pytest.param("n1[0-2]", ["n10", "n11", "n12"], id="digits-before-brackets"),
    pytest.param(
        "n[1-2],m[3-4],x",
        ["n1", "n2", "m3", "m4", "x"],
        id="commas-inside-and-between",
    ),
    pytest.param(
        "gpu-[1-2].a,cpu[01,03]",
        ["gpu-1.a", "gpu-2.a", "cpu01", "cpu03"],
        id="dash-before-brackets",
    ),
    pytest.param("n1,n1", ["n1", "n1"], id="duplicate-items-kept"),
    pytest.param("  n[1-2]\n", ["n1", "n2"], id="surrounding-whitespace"),
    pytest.param("n_x[1-2]", ["n_x1", "n_x2"], id="underscore"),
]


@pytest.mark.parametrize(("text", "expected"), EXPAND_CASES)
def test_expand_hostlist(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize(("text", "expected"), [c for c in EXPAND_CASES if c.values[1]])
def test_first_host_matches_expansion(text: str, expected: list[str]) -> None:
    assert first_host(text) == expected[0]


def test_expand_allows_exactly_max_hosts() -> None:
    hosts = expand_hostlist(f"n[1-{MAX_HOSTS}]")
    assert len(hosts) == MAX_HOSTS
    assert hosts[-1] == f"n{MAX_HOSTS}"


def test_first_host_does_not_expand_huge_product() -> None:
    # 300 x 300 = 90000 hosts is allowed; first_host must give the first without listing them.
    assert first_host("a[100-399]b[0100-0399]") == "a100b0100"


BAD_HOSTLISTS = [
    pytest.param("n[1-2", "'[' without matching ']'", id="unclosed"),
    pytest.param("n1-2]", "']' without matching '['", id="unopened"),
    pytest.param("n[1-2]]", "']' without matching '['", id="extra-close"),
    pytest.param("n[[1-2]]", "nested '['", id="nested"),
    pytest.param("n[5-3]", "range '5-3' is decreasing", id="reversed-range"),
    pytest.param("n[a-c]", "'a-c' is not a number or range", id="letters-in-range"),
    pytest.param("n[1-x]", "'1-x' is not a number or range", id="half-numeric"),
    pytest.param("n[1-2-3]", "'1-2-3' is not a number or range", id="double-dash"),
    pytest.param("n[-3]", "'-3' is not a number or range", id="negative"),
    pytest.param("n[1:4]", "'1:4' is not a number or range", id="step-syntax"),
    pytest.param("n[ 1]", "' 1' is not a number or range", id="space-in-brackets"),
    pytest.param("n[]", "empty brackets", id="empty-brackets"),
    pytest.param("n[1,,2]", "empty entry in brackets", id="empty-entry-in-brackets"),
    pytest.param("n[1,]", "empty entry in brackets", id="trailing-comma-in-brackets"),
    pytest.param("a,,b", "empty host name", id="double-comma"),
    pytest.param(",a", "empty host name", id="leading-comma"),
    pytest.param("a,", "empty host name", id="trailing-comma"),
    pytest.param(",", "empty host name", id="only-comma"),
    pytest.param("a b", "whitespace", id="inner-space"),
    pytest.param("a,\tb", "whitespace", id="tab"),
    pytest.param(f"n[0-{MAX_HOSTS}]", f"more than {MAX_HOSTS} hosts", id="range-too-large"),
    pytest.param("a[1-400]b[1-400]", f"more than {MAX_HOSTS} hosts", id="product-too-large"),
    pytest.param(f"a[1-{MAX_HOSTS}],b", f"more than {MAX_HOSTS} hosts", id="sum-too-large"),
    pytest.param("n[0-9999999999999999999]", "more than 18 digits", id="number-too-long"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_expand_hostlist_rejects(text: str, reason: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand_hostlist(text)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.text == text
    assert reason in info.value.reason


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_bad_nodelist_variable_is_one_line_naming_it(text: str, reason: str) -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": text})
    assert step is not None and step.nodelist is None
    with pytest.raises(ConfigError) as info:
        step.need("nodelist")
    message = str(info.value)
    assert message.startswith("SLURM_JOB_NODELIST=")
    assert reason in message and "accepted: comma-separated host names" in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_first_host_rejects_what_expand_rejects(text: str, reason: str) -> None:
    with pytest.raises(HostlistError, match=re.escape(reason)):
        first_host(text)


@pytest.mark.parametrize("text", ["", "   "], ids=["empty", "blank"])
def test_first_host_of_empty_list(text: str) -> None:
    with pytest.raises(HostlistError, match="no hosts"):
        first_host(text)


def test_error_message_shortens_long_input() -> None:
    text = "n" * 500 + "[3-1]"
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": text})
    assert step is not None
    message = step.problem("nodelist")
    assert message is not None and len(message) < 400 and "..." in message


# --------------------------------------------------------------------------- properties

_name_chars = st.sampled_from("abcxyz-._")
_prefixes = st.text(_name_chars, min_size=0, max_size=4).map(lambda s: "h" + s)
_suffixes = st.sampled_from(["", "i", ".ib", "-gpu"])


@st.composite
def hostlist_expressions(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A random valid expression together with its expansion computed independently."""
    texts: list[str] = []
    expected: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        text_parts: list[str] = []
        options: list[list[str]] = []
        for _ in range(draw(st.integers(1, 3))):
            literal = draw(_prefixes)
            text_parts.append(literal)
            options.append([literal])
            if draw(st.booleans()):
                pieces: list[str] = []
                numbers: list[str] = []
                for _ in range(draw(st.integers(1, 3))):
                    width = draw(st.integers(1, 3))
                    lo = draw(st.integers(0, 120))
                    hi = lo + draw(st.integers(0, 3))
                    if lo == hi and draw(st.booleans()):
                        pieces.append(f"{lo:0{width}d}")
                    else:
                        pieces.append(f"{lo:0{width}d}-{hi:0{width}d}")
                    numbers.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
                text_parts.append("[" + ",".join(pieces) + "]")
                options.append(numbers)
        texts.append("".join(text_parts))
        names = [""]
        for choice in options:
            names = [name + c for name in names for c in choice]
        expected.extend(names)
    return ",".join(texts), expected


@given(hostlist_expressions())
def test_property_expand_matches_model(case: tuple[str, list[str]]) -> None:
    text, expected = case
    assert expand_hostlist(text) == expected


@given(hostlist_expressions())
def test_property_first_host_is_first_of_expansion(case: tuple[str, list[str]]) -> None:
    text, _ = case
    assert first_host(text) == expand_hostlist(text)[0]


@given(st.integers(0, 500), st.integers(1, 5))
def test_property_duplicates_never_collapsed(number: int, copies: int) -> None:
    text = "n[" + ",".join([str(number)] * copies) + "]"
    assert expand_hostlist(text) == [f"n{number}"] * copies


@given(st.integers(0, 10_000), st.integers(0, 50), st.integers(1, 6))
def test_property_range_length_and_padding(lo: int, extra: int, width: int) -> None:
    hosts = expand_hostlist(f"n[{lo:0{width}d}-{lo + extra:0{width}d}]")
    assert len(hosts) == extra + 1
    assert hosts == [f"n{n:0{width}d}" for n in range(lo, lo + extra + 1)]


# --------------------------------------------------------------------------- tasks per node


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("4", [4], id="single"),
        pytest.param("2(x3),1", [2, 2, 2, 1], id="repeat-then-single"),
        pytest.param("1,2(x2),3", [1, 2, 2, 3], id="mixed"),
        pytest.param("8(x1)", [8], id="repeat-once"),
        pytest.param("0", [0], id="zero-tasks"),
        pytest.param("4(x4)", [4, 4, 4, 4], id="uniform"),
    ],
)
def test_tasks_per_node(text: str, expected: list[int]) -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_STEP_TASKS_PER_NODE": text})
    assert step is not None and step.problems == ()
    assert list(step.tasks_per_node) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("2(x3", "'2(x3' is not a count", id="unclosed"),
        pytest.param("2x3", "'2x3' is not a count", id="no-parens"),
        pytest.param("a", "'a' is not a count", id="letters"),
        pytest.param("2,,1", "'' is not a count", id="empty-entry"),
        pytest.param("-1", "'-1' is not a count", id="negative"),
        pytest.param("2(x0)", "repeats 0 times", id="zero-repeat"),
        pytest.param(f"1(x{MAX_HOSTS + 1})", "at most", id="too-many-nodes"),
    ],
)
def test_tasks_per_node_rejects(text: str, fragment: str) -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_STEP_TASKS_PER_NODE": text})
    assert step is not None and step.tasks_per_node == ()
    message = step.problem("tasks_per_node")
    assert message is not None
    assert fragment in message
    assert message.startswith(f"SLURM_STEP_TASKS_PER_NODE={text!r}")
    assert "accepted:" in message


# --------------------------------------------------------------------------- SlurmStep.from_env

STEP_ENV = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "3",
    "SLURM_STEP_NUM_TASKS": "3",
    "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
    "SLURM_TASKS_PER_NODE": "4(x3)",
    "SLURM_STEP_NODELIST": "jwb[0001-0003]",
    "SLURM_JOB_NODELIST": "jwb[0001-0004]",
    "SLURM_NODELIST": "jwb[0001-0004]",
    "SLURM_STEP_NUM_NODES": "3",
    "SLURM_JOB_NUM_NODES": "4",
    "SLURM_NNODES": "3",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_CLUSTER_NAME": "juwels",
    "SYSTEMNAME": "juwelsbooster",
    "PATH": "/usr/bin",
}

BATCH_ENV = {
    "SLURM_JOB_ID": "123456",
    "SLURM_NODEID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_JOB_NODELIST": "jrc[0100-0101]",
    "SLURM_NODELIST": "jrc[0100-0101]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_CLUSTER_NAME": "jureca",
}


def test_from_env_outside_slurm() -> None:
    assert SlurmStep.from_env({"PATH": "/usr/bin", "SLURM_STEP_ID": "0"}) is None


def test_from_env_empty_job_id_is_outside_slurm() -> None:
    assert SlurmStep.from_env({"SLURM_JOB_ID": ""}) is None


def test_from_env_node_id_alone_is_read() -> None:
    step = SlurmStep.from_env({"SLURM_NODEID": "3"})
    assert step is not None and step.node_id == 3 and step.job_id is None
    assert not step.in_step


def test_from_env_srun_step() -> None:
    step = SlurmStep.from_env(STEP_ENV)
    assert step == SlurmStep(
        job_id="123456",
        step_id="0",
        node_id=1,
        tasks_per_node=(1, 1, 1),
        nodelist="jwb[0001-0003]",
        num_nodes=3,
        gpus_on_node=4,
        system_name="juwelsbooster",
    )
    assert step.in_step
    assert step.is_multi_node
    assert step.tasks_on_this_node == 1
    assert rendezvous_id(step) == "slurm-123456-0"


def test_from_env_batch_script() -> None:
    step = SlurmStep.from_env(BATCH_ENV)
    assert step is not None
    assert step.step_id is None
    assert not step.in_step
    assert step.tasks_per_node == (4, 4)
    assert step.nodelist == "jrc[0100-0101]"
    assert step.num_nodes == 2
    assert step.is_multi_node
    assert step.tasks_on_this_node == 4
    assert step.gpus_on_node is None
    assert step.system_name is None
    assert rendezvous_id(step) == "slurm-123456"


def test_from_env_minimal() -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "7"})
    assert step == SlurmStep(job_id="7")
    assert step is not None
    assert not step.in_step
    assert not step.is_multi_node
    assert step.tasks_on_this_node is None


def test_from_env_is_frozen() -> None:
    step = SlurmStep.from_env(STEP_ENV)
    assert step is not None
    with pytest.raises(AttributeError):
        step.job_id = "1"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        pytest.param(
            {"SLURM_STEP_TASKS_PER_NODE": None},
            "tasks_per_node",
            (4, 4, 4),
            id="tasks-per-node-fallback",
        ),
        pytest.param(
            {"SLURM_STEP_NODELIST": None},
            "nodelist",
            "jwb[0001-0004]",
            id="step-nodelist-falls-back-to-job",
        ),
        pytest.param(
            {"SLURM_STEP_NODELIST": None, "SLURM_JOB_NODELIST": None},
            "nodelist",
            "jwb[0001-0004]",
            id="nodelist-from-SLURM_NODELIST",
        ),
        pytest.param({"SLURM_STEP_NUM_NODES": None}, "num_nodes", 4, id="num-nodes-from-job"),
        pytest.param(
            {"SLURM_STEP_NUM_NODES": None, "SLURM_JOB_NUM_NODES": None},
            "num_nodes",
            3,
            id="num-nodes-from-SLURM_NNODES",
        ),
        pytest.param({"SLURM_STEP_ID": "batch"}, "step_id", "batch", id="batch-step-id"),
        pytest.param({"SLURM_GPUS_ON_NODE": ""}, "gpus_on_node", None, id="empty-is-unset"),
        pytest.param({"SLURM_NODEID": " 2 "}, "node_id", 2, id="surrounding-space-ok"),
        pytest.param({"SLURM_CPUS_PER_TASK": "48"}, "cpus_per_task", 48, id="cpus-per-task"),
        pytest.param({"SYSTEMNAME": None}, "system_name", None, id="no-systemname"),
    ],
)
def test_from_env_fallbacks(
    overrides: dict[str, Optional[str]], field: str, expected: object
) -> None:
    env = {k: v for k, v in {**STEP_ENV, **overrides}.items() if v is not None}
    step = SlurmStep.from_env(env)
    assert step is not None
    assert getattr(step, field) == expected


@pytest.mark.parametrize(
    ("name", "value", "field", "accepted"),
    [
        pytest.param("SLURM_NODEID", "one", "node_id", "non-negative integer", id="word"),
        pytest.param("SLURM_STEP_NUM_NODES", "3x", "num_nodes", "integer >= 1", id="suffix"),
        pytest.param("SLURM_STEP_NUM_NODES", "0", "num_nodes", "integer >= 1", id="zero"),
        pytest.param("SLURM_GPUS_ON_NODE", "\u00b2", "gpus_on_node", "non-negative", id="sup2"),
        pytest.param("SLURM_GPUS_ON_NODE", "9" * 30, "gpus_on_node", "non-negative", id="long"),
        pytest.param("SLURM_CPUS_PER_TASK", "0", "cpus_per_task", "integer >= 1", id="cpus"),
        pytest.param(
            "SLURM_STEP_TASKS_PER_NODE", "2(x", "tasks_per_node", "'2(x' is not a count", id="t"
        ),
        pytest.param("SLURM_STEP_NODELIST", "jwb[0003-0001]", "nodelist", "decreasing", id="s"),
        pytest.param("SLURM_JOB_NODELIST", "jwb[0001", "nodelist", "without matching", id="j"),
    ],
)
def test_bad_values_are_problems_of_their_field(
    name: str, value: str, field: str, accepted: str
) -> None:
    env = {**STEP_ENV, name: value}
    if name == "SLURM_JOB_NODELIST":
        del env["SLURM_STEP_NODELIST"]
    step = SlurmStep.from_env(env)
    assert step is not None
    assert getattr(step, field) in (None, ())
    step.need("system_name")  # another field: no error
    with pytest.raises(ConfigError) as info:
        step.need(field)
    message = str(info.value)
    assert message.startswith(f"{name}={value!r}"[:40])
    assert accepted in message and "accepted" in message and "\n" not in message


def test_bad_preferred_variable_does_not_fall_back() -> None:
    """A bad value in the preferred variable is a problem even when the fallback is fine."""
    step = SlurmStep.from_env({**STEP_ENV, "SLURM_STEP_NUM_NODES": "many"})
    assert step is not None and step.num_nodes is None
    with pytest.raises(ConfigError, match="SLURM_STEP_NUM_NODES"):
        step.need("num_nodes")


# --------------------------------------------------------------------------- properties of steps


@pytest.mark.parametrize(
    ("step_id", "expected"),
    [
        pytest.param(None, False, id="absent"),
        pytest.param("0", True, id="first-step"),
        pytest.param("12", True, id="later-step"),
        pytest.param("batch", False, id="batch"),
        pytest.param("extern", False, id="extern"),
        pytest.param("interactive", False, id="interactive"),
        pytest.param("4294967294", False, id="numeric-batch"),
        pytest.param("4294967295", False, id="numeric-extern"),
        pytest.param("4294967290", False, id="numeric-interactive"),
    ],
)
def test_in_step(step_id: Optional[str], expected: bool) -> None:
    assert SlurmStep(job_id="1", step_id=step_id).in_step is expected


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        pytest.param(SlurmStep(job_id="1", num_nodes=1), False, id="one-node"),
        pytest.param(SlurmStep(job_id="1", num_nodes=2), True, id="two-nodes"),
        pytest.param(
            SlurmStep(job_id="1", num_nodes=1, nodelist="n[1-2]"),
            False,
            id="count-wins-over-list",
        ),
        pytest.param(SlurmStep(job_id="1", nodelist="n1"), False, id="list-one"),
        pytest.param(SlurmStep(job_id="1", nodelist="n[1-2]"), True, id="list-range"),
        pytest.param(SlurmStep(job_id="1", nodelist="n1,m1"), True, id="list-two-items"),
        pytest.param(SlurmStep(job_id="1", tasks_per_node=(2, 2)), True, id="tasks-two-nodes"),
        pytest.param(SlurmStep(job_id="1", tasks_per_node=(4,)), False, id="tasks-one-node"),
        pytest.param(SlurmStep(job_id="1"), False, id="nothing-known"),
    ],
)
def test_is_multi_node(step: SlurmStep, expected: bool) -> None:
    assert step.is_multi_node is expected


@pytest.mark.parametrize(
    ("node_id", "tasks", "expected"),
    [
        pytest.param(0, (2, 2, 2, 1), 2, id="first"),
        pytest.param(3, (2, 2, 2, 1), 1, id="last"),
        pytest.param(4, (2, 2, 2, 1), None, id="out-of-range"),
        pytest.param(None, (4,), 4, id="no-node-id-single-node"),
        pytest.param(None, (4, 4), None, id="no-node-id-many-nodes"),
        pytest.param(0, (), None, id="no-tasks"),
    ],
)
def test_tasks_on_this_node(
    node_id: Optional[int], tasks: tuple[int, ...], expected: Optional[int]
) -> None:
    step = SlurmStep(job_id="1", node_id=node_id, tasks_per_node=tasks)
    assert step.tasks_on_this_node == expected


# --------------------------------------------------------------------------- rendezvous


@pytest.mark.parametrize(
    ("job_id", "expected"),
    [
        pytest.param("0", PORT_BASE, id="zero"),
        pytest.param("1234", PORT_BASE + 1234, id="small"),
        pytest.param(str(PORT_SPAN), PORT_BASE, id="wraps"),
        pytest.param("12345678", PORT_BASE + 12345678 % PORT_SPAN, id="large"),
    ],
)
def test_rendezvous_port_numeric(job_id: str, expected: int) -> None:
    assert rendezvous_port(job_id) == expected


def test_rendezvous_port_range_avoids_ephemeral_and_well_known() -> None:
    assert PORT_BASE >= 1024
    assert PORT_BASE + PORT_SPAN <= 32768  # Linux default ip_local_port_range starts at 32768
    assert PORT_BASE <= 29500 < PORT_BASE + PORT_SPAN


def test_rendezvous_port_consecutive_jobs_differ() -> None:
    ports = {rendezvous_port(str(job)) for job in range(1_000_000, 1_000_100)}
    assert len(ports) == 100


@pytest.mark.parametrize("job_id", ["1234_5", "1234+0", "abc", "9" * 40])
def test_rendezvous_port_non_numeric_is_stable_and_in_range(job_id: str) -> None:
    port = rendezvous_port(job_id)
    assert port == rendezvous_port(job_id)
    assert PORT_BASE <= port < PORT_BASE + PORT_SPAN


def test_rendezvous_port_array_tasks_differ() -> None:
    assert rendezvous_port("1234_5") != rendezvous_port("1234_6")


@given(st.text(min_size=1).filter(lambda s: s == s.strip()))
def test_property_rendezvous_port_in_range(job_id: str) -> None:
    assert PORT_BASE <= rendezvous_port(job_id) < PORT_BASE + PORT_SPAN


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        pytest.param(SlurmStep(job_id="42", step_id="3"), "slurm-42-3", id="step"),
        pytest.param(SlurmStep(job_id="42"), "slurm-42", id="no-step"),
        pytest.param(SlurmStep(job_id="42", step_id="batch"), "slurm-42-batch", id="batch"),
    ],
)
def test_rendezvous_id(step: SlurmStep, expected: str) -> None:
    assert rendezvous_id(step) == expected


def test_rendezvous_id_differs_between_steps_of_one_job() -> None:
    assert rendezvous_id(SlurmStep(job_id="42", step_id="0")) != rendezvous_id(
        SlurmStep(job_id="42", step_id="1")
    )
