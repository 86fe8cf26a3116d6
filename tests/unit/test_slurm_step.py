"""Tests for torchrun_jsc.slurm's step environment: SlurmStep.from_env, tasks per node, the
problems of bad values, the step's properties."""

from __future__ import annotations

from typing import Optional

import pytest

from torchrun_jsc.errors import ConfigError
from torchrun_jsc.slurm import MAX_HOSTS, SlurmStep, rendezvous_id

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


@pytest.mark.parametrize(
    ("env", "count"),
    [
        pytest.param({"SLURM_STEP_NODELIST": "n[1-3],m1"}, 4, id="step-list"),
        pytest.param({"SLURM_JOB_NODELIST": "n[01-02]"}, 2, id="job-list"),
        pytest.param({"SLURM_STEP_TASKS_PER_NODE": "1(x5)"}, 5, id="task-layout"),
        pytest.param({"SLURM_STEP_NODELIST": "n[3-1]"}, None, id="bad-list-counts-nothing"),
        pytest.param({}, None, id="nothing-known"),
    ],
)
def test_without_a_node_count_variable_the_node_list_is_counted(
    env: dict[str, str], count: Optional[int]
) -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", **env})
    assert step is not None and step.num_nodes == count
