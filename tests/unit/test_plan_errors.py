"""Bad input to the pure plan: one-line errors, the plan's own error, ignored keys."""

from __future__ import annotations

from typing import Dict

import pytest

from torchrun_jsc.errors import ConfigError

from .layouts import node
from .planning import JSC, SCRIPT, plan, request

# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        (
            {"TORCHRUN_JSC_PREFER_ARG_PATCHING": "maybe"},
            JSC,
            r"^TORCHRUN_JSC_PREFER_ARG_PATCHING='maybe' is not valid; accepted: 0 or 1 ",
        ),
        (
            {"TORCHRUN_JSC_NODE_RANK": "abc"},
            JSC,
            r"^TORCHRUN_JSC_NODE_RANK='abc' is not valid; accepted: an integer in 0..1000000$",
        ),
        (
            {"TORCHRUN_JSC_HOST_NODE_RANK": "-1"},
            JSC,
            r"^TORCHRUN_JSC_HOST_NODE_RANK='-1' is not valid; accepted: an integer in 0..1000000$",
        ),
        ({"SLURM_NODEID": "x1"}, JSC, r"^SLURM_NODEID='x1' is not valid"),
        ({"TORCHRUN_JSC_RESOLVE_TIMEOUT": "soon"}, JSC, r"TORCHRUN_JSC_RESOLVE_TIMEOUT='soon'"),
        ({"TORCHRUN_JSC_EXPLAIN": "yaml"}, JSC, r"accepted: empty, 'text' \(or 1\) or 'json'$"),
        ({"TORCHRUN_JSC_NODERANK": "1"}, JSC, r"^unknown variable TORCHRUN_JSC_NODERANK; known:"),
        (
            {},
            [*JSC[:-3], "--rdzv_conf=is_host=maybe", *SCRIPT],
            r"^--rdzv_conf is_host='maybe' is not valid; accepted: 1/0, true/false",
        ),
        ({}, [*JSC[:-3], "--rdzv_conf=a=1,", *SCRIPT], r"'' is not KEY=VALUE"),
        (
            {},
            ["--rdzv_backend=c10d", "--rdzv_endpoint=fd00::1", *SCRIPT],
            r"an IPv6 address needs brackets",
        ),
        (
            {},
            ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i:http", *SCRIPT],
            r"port 'http' is not an integer in 0\.\.65535",
        ),
        ({"PET_STANDALONE": "yes"}, JSC, r"^PET_STANDALONE='yes' cannot be read by torchrun"),
    ],
    ids=[
        "arg-patching",
        "node-rank",
        "host-rank",
        "slurm-nodeid",
        "timeout",
        "explain",
        "unknown",
        "is-host",
        "conf-trailing-comma",
        "ipv6-no-brackets",
        "port",
        "pet-flag",
    ],
)
def test_bad_input_is_one_line_config_error(
    env: Dict[str, str], argv: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        plan(argv, env=env)
    assert "\n" not in str(info.value)


def test_unresolvable_endpoint_is_the_plans_error() -> None:
    facts = node(1, resolve_error="Name or service not known")
    p = plan(env={"SLURM_NODEID": "1"}, facts=facts)
    assert p.verdict == "error" and p.refusal is None and p.predicted_failures == ()
    assert p.error == (
        "--rdzv_endpoint host 'node0i' does not resolve on node1 (Name or service not known)"
        " after 5 s; accepted: a name or address every node can resolve"
    )
    assert not p.changes_anything, "nothing is planned for a launch that cannot be planned"


def test_ignored_rdzv_timeout_key_warns() -> None:
    argv = [*JSC[:-3], "--rdzv_conf=timeout=30", *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert any("timeout=30 is ignored" in w and "join_timeout" in w for w in p.warnings)


def test_bad_is_host_is_reported_before_look_ups_even_for_a_loopback_endpoint() -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:1", "--rdzv_conf=is_host=2", *SCRIPT]
    with pytest.raises(ConfigError, match="is_host='2' is not valid"):
        request(argv)
