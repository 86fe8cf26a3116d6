"""Tests for torchrun_jsc.slurm's rendezvous port and id of a job's step."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchrun_jsc.slurm import PORT_BASE, PORT_SPAN, SlurmStep, rendezvous_id, rendezvous_port

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
