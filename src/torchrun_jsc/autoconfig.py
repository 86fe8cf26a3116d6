"""Slurm auto-configuration (opt-in, ``TORCHRUN_JSC_SLURM_AUTO=1``): fill in only what the
user left out, from the step's environment. Pure: environment in, arguments out.

| option | from |
|---|---|
| ``--nnodes`` | the step's node count |
| ``--rdzv_backend`` | ``c10d`` |
| ``--rdzv_endpoint`` | first node of the step's nodelist + host suffix, port from the job id |
| ``--rdzv_id`` | ``slurm-<job>-<step>`` |
| ``--nproc_per_node`` | ``SLURM_GPUS_ON_NODE``, when Slurm gives GPUs |
"""

from __future__ import annotations

from typing import FrozenSet, List, NamedTuple, Optional, Tuple

from . import network, slurm
from .errors import ConfigError

#: SYSTEMNAME values (JSC's environment) whose compute nodes are reached through ``<host>i``.
SUFFIX_DEFAULTS = {
    "juwels": "i",
    "juwelsbooster": "i",
    "jurecadc": "i",
    "jureca": "i",
    "jusuf": "i",
}


class AutoArgs(NamedTuple):
    """Arguments auto-configuration adds, each with the reason for explain."""

    args: Tuple[str, ...]
    reasons: Tuple[Tuple[str, str, str], ...]  # (option, value, reason)

    @property
    def values(self) -> Tuple[Tuple[str, str], ...]:
        """``(dest, value)`` of every added option, as torch's parser stores them."""
        return tuple((option, value) for option, value, _ in self.reasons)


def host_suffix(configured: Optional[str], step: slurm.SlurmStep) -> Tuple[str, str]:
    """``(suffix, why)``: ``TORCHRUN_JSC_HOST_SUFFIX`` if set, else the system's default."""
    if configured is not None:
        return configured, "TORCHRUN_JSC_HOST_SUFFIX"
    system = (step.system_name or "").lower()
    if system in SUFFIX_DEFAULTS:
        return SUFFIX_DEFAULTS[system], f"default for SYSTEMNAME={step.system_name}"
    return "", "no suffix (TORCHRUN_JSC_HOST_SUFFIX unset, system not known to need one)"


def slurm_args(
    step: slurm.SlurmStep, given: FrozenSet[str], backend: str, suffix: Optional[str]
) -> AutoArgs:
    """The torchrun arguments to add for ``step``; options in ``given`` are never touched.

    ``backend`` is the rendezvous backend the user's command line asks for (if given). Raises
    :class:`ConfigError` when the step lacks what an option needs (and names it).
    """
    args: List[str] = []
    reasons: List[Tuple[str, str, str]] = []

    def add(option: str, value: str, reason: str) -> None:
        args.append(f"--{option}={value}")
        reasons.append((option, value, reason))

    if "standalone" in given:
        return AutoArgs((), ())
    step.need("num_nodes", "gpus_on_node", "nodelist")
    if "nnodes" not in given and step.num_nodes is not None:
        add("nnodes", str(step.num_nodes), "the step's node count")
    if "nproc_per_node" not in given and step.gpus_on_node:
        add("nproc_per_node", str(step.gpus_on_node), "SLURM_GPUS_ON_NODE")
    if "rdzv_backend" not in given:
        add("rdzv_backend", "c10d", "auto-configuration uses the c10d rendezvous")
    elif backend != "c10d":
        return AutoArgs(tuple(args), tuple(reasons))
    if "rdzv_endpoint" not in given:
        if not step.nodelist:
            raise ConfigError(
                "TORCHRUN_JSC_SLURM_AUTO=1 cannot choose --rdzv_endpoint: SLURM_STEP_NODELIST and"
                " SLURM_JOB_NODELIST are unset; accepted: a Slurm step that has them, or"
                " --rdzv_endpoint=HOST:PORT"
            )
        first = slurm.first_host(step.nodelist)
        text, why = host_suffix(suffix, step)
        problem = network.host_problem(first + text)
        if problem:
            raise ConfigError(
                f"the auto-configured endpoint host {first + text!r} ({why} appended to the"
                f" first node) is not valid: {problem}; accepted: a TORCHRUN_JSC_HOST_SUFFIX that"
                " makes a host name, or --rdzv_endpoint"
            )
        assert step.job_id is not None  # in_step
        port = slurm.rendezvous_port(step.job_id)
        add(
            "rdzv_endpoint",
            f"{first}{text}:{port}",
            f"first node of {step.nodelist}, suffix {text!r} ({why}), "
            f"port from job id {step.job_id}",
        )
    if "rdzv_id" not in given:
        add("rdzv_id", slurm.rendezvous_id(step), "job and step id")
    return AutoArgs(tuple(args), tuple(reasons))
