"""Table-driven tests of the pure plan: torch versions x settings x spellings x layouts."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pytest

from torchrun_jsc import lifecycle
from torchrun_jsc.errors import ConfigError
from torchrun_jsc.facts import NodeFacts
from torchrun_jsc.plan import Plan
from torchrun_jsc.versions import TESTED_RELEASES

from .layouts import ib, ib6, mgmt, node
from .planning import plan as planned
from .planning import request

SCRIPT = ["train.py", "--lr", "0.1"]
JSC = [
    "--nnodes=4",
    "--nproc_per_node=1",
    "--rdzv_backend=c10d",
    "--rdzv_id=7",
    "--rdzv_endpoint=node0i:29500",
    *SCRIPT,
]
#: Every tested release (the version table's list), and spellings and releases around them:
#: untested minors within the supported range, a pre-release, local version parts and a
#: release newer than every tested one.
ALL_VERSIONS = [
    *TESTED_RELEASES,
    "1.9.0",
    "1.10.2",
    "1.11.0",
    "1.12.1",
    "1.13.0a0",
    "2.11.0+cu130",
    "2.13.0+cpu",
    "3.0.0",
]


def plan(
    argv: list[str] = JSC,
    env: Optional[Dict[str, str]] = None,
    version: str = "2.13.0",
    facts: Optional[NodeFacts] = None,
) -> Plan:
    return planned(argv, env, version, facts)


def patch_names(p: Plan) -> Tuple[str, ...]:
    """The patches that fix the start (the agent-side ones are tested in test_lifecycle.py)."""
    return tuple(spec.name for spec in p.patches if spec.name not in lifecycle.PATCHES)


def start_patches(p: Plan) -> list[tuple[str, dict[str, object]]]:
    return [(s.name, s.data) for s in p.patches if s.name not in lifecycle.PATCHES]


def script_args(p: Plan) -> list[str]:
    return list(p.argv[-len(SCRIPT) :])


# ----------------------------------------------------------------------------- versions


# version -> (adds --local_addr, advertise patch) with default settings
EXPECTED_MECHANISM = {
    (1, 9): (False, "fq_hostname"),
    (1, 10): (False, "fq_hostname"),
    (1, 11): (False, "fq_hostname"),
    (1, 12): (False, "fq_hostname"),
    (1, 13): (False, "fq_hostname"),
    (2, 0): (True, None),
    (2, 1): (True, None),
    (2, 2): (True, None),
    (2, 3): (True, None),
    (2, 4): (False, "store_info_build"),
}


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("node_id", [0, 2])
def test_every_version_advertises_own_ib_address(version: str, node_id: int) -> None:
    p = plan(env={"SLURM_NODEID": str(node_id)}, version=version, facts=node(node_id))
    major, minor = (int(x) for x in version.split(".")[:2])
    uses_arg, patch = EXPECTED_MECHANISM.get((major, minor), (True, None))
    assert p.advertised_address == ib(node_id)
    assert (f"--local_addr={ib(node_id)}" in p.added_args) is uses_arg
    advertise = [s for s in p.patches if s.name in ("fq_hostname", "store_info_build", "node_desc")]
    if patch is None:
        assert advertise == []
    else:
        assert [(s.name, s.data) for s in advertise] == [(patch, {"address": ib(node_id)})]
    assert p.is_host is (node_id == 0)
    assert f"--rdzv_conf=is_host={int(node_id == 0)}" in p.added_args
    expected_env = {"GLOO_SOCKET_IFNAME": "ib", "NCCL_SOCKET_IFNAME": "ib"}
    if (major, minor) == (2, 5):  # restarts need torch's own opt-out of the shared store
        expected_env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    assert dict(p.env) == expected_env
    assert script_args(p) == SCRIPT, "added arguments go before the script"
    assert ("std_from_str" in patch_names(p)) is (major < 2)
    assert ("keep_rendezvous" in patch_names(p)) is ((major, minor) == (2, 3))
    assert any("newer than every release" in w for w in p.warnings) is (major >= 3)


@pytest.mark.parametrize("version", ["2.0.1", "2.3.1", "2.5.1", "2.13.0", "2.15.0"])
def test_prefer_old_solution_patches_instead_of_local_addr(version: str) -> None:
    p = plan(
        env={"SLURM_NODEID": "1", "TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1"},
        version=version,
        facts=node(1),
    )
    assert not any(a.startswith("--local_addr") for a in p.added_args)
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    expected = "fq_hostname" if major_minor < (2, 4) else "node_desc"
    advertise = [(n, kw) for n, kw in start_patches(p) if n != "keep_rendezvous"]
    assert advertise == [(expected, {"address": ib(1)})]


@pytest.mark.parametrize(
    ("version", "words"),
    [
        ("1.8.1", "torch 1.8.1 is not supported: torchrun_jsc needs torch >= 1.9"),
        ("0.4.0", "torch 0.4.0 is not supported: torchrun_jsc needs torch >= 1.9"),
        ("1.2", "torch 1.2 is not supported: torchrun_jsc needs torch >= 1.9"),
        ("abc", "cannot read the torch version 'abc'; expected MAJOR.MINOR[.PATCH]"),
    ],
)
def test_unsupported_torch_is_the_plans_error(version: str, words: str) -> None:
    """The plan returns its verdict, it does not raise; nothing is planned."""
    p = plan(version=version)
    assert (p.verdict, p.error) == ("error", words)
    assert p.argv == tuple(JSC) and not p.changes_anything and p.warnings == ()


# ----------------------------------------------------------------------------- spellings


SPELLINGS = {
    "equals": [
        "--nnodes=2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i:29500",
        "--rdzv_conf=join_timeout=5",
        *SCRIPT,
    ],
    "space": [
        "--nnodes",
        "2",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "node0i:29500",
        "--rdzv_conf",
        "join_timeout=5",
        *SCRIPT,
    ],
    "dashes": [
        "--nnodes",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint=node0i:29500",
        "--rdzv-conf",
        "join_timeout=5",
        *SCRIPT,
    ],
    "abbreviated": [
        "--nn=2",
        "--rdzv_b",
        "c10d",
        "--rdzv_e=node0i:29500",
        "--rdzv_c=join_timeout=5",
        *SCRIPT,
    ],
    "module": [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i:29500",
        "--rdzv_conf=join_timeout=5",
        "-m",
        "pkg.train",
        "--lr",
        "0.1",
    ],
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_is_understood(spelling: str) -> None:
    argv = SPELLINGS[spelling]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert p.added_args == ("--rdzv_conf=join_timeout=5,is_host=1", f"--local_addr={ib(0)}")
    # the user's arguments stay, in order; ours come right before the script
    n = len(p.added_args)
    script_at = len(argv) - 3
    assert list(p.argv[:script_at]) == argv[:script_at]
    assert list(p.argv[script_at : script_at + n]) == list(p.added_args)
    assert list(p.argv[script_at + n :]) == argv[script_at:]


def test_pet_variables_are_read_like_torchrun() -> None:
    env = {
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "node0i:29500",
        "PET_RDZV_CONF": "read_timeout=9",
        "SLURM_NODEID": "3",
    }
    p = plan(["--nnodes=4", *SCRIPT], env=env, facts=node(3))
    assert "--rdzv_conf=read_timeout=9,is_host=0" in p.added_args
    assert f"--local_addr={ib(3)}" in p.added_args


def test_is_host_from_pet_rdzv_conf_is_kept() -> None:
    env = {"PET_RDZV_CONF": "is_host=yes,join_timeout=3", "SLURM_NODEID": "2"}
    p = plan(env=env, facts=node(2))
    assert p.is_host is True
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    assert p.predicted_failures, "host but the endpoint is not this node's: predicted failure"


def test_user_rdzv_conf_keys_kept_and_last_one_wins() -> None:
    argv = [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i",
        "--rdzv_conf=a=1",
        "--rdzv_conf",
        "b=2,b=3",
        *SCRIPT,
    ]
    p = plan(argv, env={"SLURM_NODEID": "1"}, facts=node(1))
    assert p.added_args[0] == "--rdzv_conf=b=3,is_host=0"


@pytest.mark.parametrize("given", ["is_host=0", "is_host=TRUE", "is_host=n"])
def test_user_is_host_is_never_overridden(given: str) -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", f"--rdzv_conf={given}", *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    assert p.is_host is (given.split("=")[1].lower() in ("true", "1", "y"))


@pytest.mark.parametrize("flag", ["--local_addr=node0x", "--local-addr", "--local_a"])
def test_user_local_addr_is_never_overridden(flag: str) -> None:
    parts = [flag, "node0x"] if "=" not in flag else [flag]
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", *parts, *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert not any(a.startswith("--local_addr") for a in p.added_args)
    assert "node_desc" not in patch_names(p)


def test_user_local_addr_on_torch_2_4_is_honoured_by_patch() -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=node0i", "--local_addr=node1i", *SCRIPT]
    p = plan(argv, env={"SLURM_NODEID": "1"}, version="2.4.1", facts=node(1))
    assert start_patches(p) == [("store_info_build", {"address": "node1i"})]


# ----------------------------------------------------------------------------- untouched


@pytest.mark.parametrize(
    "argv",
    [
        ["--standalone", "--nproc-per-node=2", *SCRIPT],
        ["--nnodes=2", "--rdzv_backend=static", "--master_addr=node0i", *SCRIPT],
        ["--rdzv_backend=etcd-v2", "--rdzv_endpoint=node0i:2379", *SCRIPT],
        ["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400", *SCRIPT],
        ["--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29400", *SCRIPT],
        ["--rdzv_backend=c10d", "--rdzv_endpoint=[::1]:29400", *SCRIPT],
        ["--rdzv_backend=c10d", *SCRIPT],
        ["--standalone", "--nnodes=2", *SCRIPT],
        ["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400", *SCRIPT],
        ["--help"],
        ["--no-such-option", *SCRIPT],
    ],
    ids=[
        "standalone",
        "static",
        "etcd",
        "localhost",
        "loopback4",
        "loopback6",
        "no-endpoint",
        "standalone-nnodes-2",
        "localhost-nnodes-2",
        "help",
        "usage-error",
    ],
)
def test_left_untouched(argv: list[str]) -> None:
    """The start is torch's own (only the agent-side mechanisms of test_lifecycle.py apply)."""
    p = plan(argv, env={"SLURM_NODEID": "0"})
    assert p.argv == tuple(argv)
    assert p.added_args == () and p.env == () and patch_names(p) == ()
    assert request(argv).lookup_host is None


def test_endpoint_name_resolving_to_loopback_only_is_untouched() -> None:
    facts = node(0, endpoint_host="myhost", endpoint_addresses=("127.0.1.1",))
    p = plan(["--rdzv_backend=c10d", "--rdzv_endpoint=myhost:1", *SCRIPT], facts=facts)
    assert p.added_args == () and p.env == () and patch_names(p) == ()


def test_torch_1_x_on_python_3_11_gets_the_std_fix_even_when_untouched() -> None:
    p = plan(["--standalone", *SCRIPT], version="1.13.1")
    assert patch_names(p) == ("std_from_str",)
    p = plan(["--standalone", *SCRIPT], version="1.13.1", env={"TORCHRUN_JSC_FIX_TORCH_BUGS": "0"})
    assert patch_names(p) == ()
    assert any("crashes" in w for w in p.warnings)


@pytest.mark.parametrize(
    "argv",
    [
        ["--standalone", *SCRIPT],
        [
            "--nnodes=4",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=node0i:29500",
            "--max_restarts=1",
            *SCRIPT,
        ],
    ],
)
@pytest.mark.parametrize("version", ["2.2.2", "2.3.0", "2.3.1", "2.4.1"])
def test_torch_2_3_keeps_the_rendezvous_open_on_restarts(argv: list[str], version: str) -> None:
    p = plan(argv, env={"SLURM_NODEID": "1"}, version=version, facts=node(1))
    assert ("keep_rendezvous" in patch_names(p)) is version.startswith("2.3.")
    off = plan(
        argv,
        env={"SLURM_NODEID": "1", "TORCHRUN_JSC_FIX_TORCH_BUGS": "0"},
        version=version,
        facts=node(1),
    )
    assert "keep_rendezvous" not in patch_names(off)
    assert any("RendezvousClosedError" in w for w in off.warnings) is version.startswith("2.3.")


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("host_node", [0, 2, 3])
@pytest.mark.parametrize("this_node", [0, 1, 2, 3])
def test_store_host_on_any_node_with_host_node_rank(host_node: int, this_node: int) -> None:
    argv = [a.replace("node0i", f"node{host_node}i") for a in JSC]
    facts = node(this_node, f"node{host_node}i", (ib(host_node),))
    env = {"SLURM_NODEID": str(this_node), "TORCHRUN_JSC_HOST_NODE_RANK": str(host_node)}
    p = plan(argv, env=env, facts=facts)
    assert p.is_host is (this_node == host_node)
    # every node advertises itself, not the store host: group rank 0 may be any node
    assert p.advertised_address == ib(this_node)
    assert not p.predicted_failures
    assert not p.warnings


def test_endpoint_on_another_node_than_host_rank_warns_and_predicts_failure() -> None:
    argv = [a.replace("node0i", "node2i") for a in JSC]
    at2 = plan(argv, env={"SLURM_NODEID": "2"}, facts=node(2, "node2i", (ib(2),)))
    assert at2.is_host is False
    assert any("TORCHRUN_JSC_HOST_NODE_RANK=2" in f for f in at2.predicted_failures)
    at0 = plan(argv, env={"SLURM_NODEID": "0"}, facts=node(0, "node2i", (ib(2),)))
    assert at0.is_host is True and at0.predicted_failures


@pytest.mark.parametrize("this_node", [0, 1, 3])
def test_without_slurm_is_host_by_address(this_node: int) -> None:
    p = plan(env={}, facts=node(this_node))
    assert p.is_host is (this_node == 0)
    assert "by address" not in p.summary()
    assert any(d.topic == "is_host" and "address of this node" in d.reason for d in p.decisions)


def test_without_slurm_and_host_by_address_off_leaves_is_host_to_torch() -> None:
    p = plan(env={"TORCHRUN_JSC_HOST_BY_ADDRESS": "0"}, facts=node(0))
    assert p.is_host is None
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    assert f"--local_addr={ib(0)}" in p.added_args


def test_torchrun_jsc_node_rank_wins_over_slurm() -> None:
    p = plan(env={"SLURM_NODEID": "0", "TORCHRUN_JSC_NODE_RANK": "1"}, facts=node(1))
    assert p.is_host is False
    assert any("TORCHRUN_JSC_NODE_RANK" in d.reason for d in p.decisions)


@pytest.mark.parametrize(
    ("endpoint", "addresses"),
    [
        ("10.78.0.10:29500", (ib(0),)),
        ("[fd00:78::10]:29500", (ib6(0),)),
        ("node0i6:29500", (ib6(0),)),
        ("node0i:29500", (ib6(0), ib(0))),
    ],
    ids=["ipv4", "ipv6-literal", "ipv6-name", "dual-stack"],
)
@pytest.mark.parametrize("this_node", [0, 2])
def test_ip_and_ipv6_endpoints(endpoint: str, addresses: Tuple[str, ...], this_node: int) -> None:
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    argv = [a.replace("node0i:29500", endpoint) for a in JSC]
    p = plan(argv, env={}, facts=node(this_node, host, addresses))
    assert p.is_host is (this_node == 0)
    first = addresses[0]
    want = (ib6 if ":" in first else ib)(this_node)
    assert p.advertised_address == want
    assert f"--local_addr={want}" in p.added_args
    assert not any("[" in a for a in p.added_args if a.startswith("--local_addr"))
    assert dict(p.env)["GLOO_SOCKET_IFNAME"] == "ib"


def test_endpoint_host_strips_ipv6_brackets() -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=[fd00:78::a]:29500", *SCRIPT]
    assert request(argv).lookup_host == "fd00:78::a"


@pytest.mark.parametrize("variable", ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"])
def test_socket_ifname_set_by_user_is_kept(variable: str) -> None:
    p = plan(env={"SLURM_NODEID": "1", variable: "eth7"}, facts=node(1))
    env = dict(p.env)
    assert variable not in env
    assert len(env) == 1


def test_socket_ifname_switch_off() -> None:
    p = plan(env={"SLURM_NODEID": "1", "TORCHRUN_JSC_SET_SOCKET_IFNAME": "0"}, facts=node(1))
    assert p.env == ()


def test_advertise_switch_off() -> None:
    p = plan(env={"SLURM_NODEID": "1", "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS": "0"}, facts=node(1))
    assert p.added_args == ("--rdzv_conf=is_host=0",)
    p = plan(
        env={"SLURM_NODEID": "1", "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS": "0"},
        version="1.13.1",
        facts=node(1),
    )
    assert patch_names(p) == ("std_from_str",)


def test_mgmt_endpoint_advertises_mgmt_address() -> None:
    argv = [a.replace("node0i", "node0") for a in JSC]
    p = plan(argv, env={"SLURM_NODEID": "1"}, facts=node(1, "node0", (mgmt(0),)))
    assert p.advertised_address == mgmt(1)
    assert dict(p.env)["GLOO_SOCKET_IFNAME"] == "mgmt"


def test_no_route_to_endpoint_is_a_predicted_failure() -> None:
    p = plan(env={"SLURM_NODEID": "1"}, facts=node(1, routable=False))
    assert p.advertised_address is None
    assert any("no route" in f for f in p.predicted_failures)


# ----------------------------------------------------------------------------- arg patching off


@pytest.mark.parametrize("this_node", [0, 1])
def test_prefer_arg_patching_off_patches_host_matcher(this_node: int) -> None:
    env = {"TORCHRUN_JSC_PREFER_ARG_PATCHING": "0", "SLURM_NODEID": "5"}
    p = plan(env=env, facts=node(this_node))
    assert not any(a.startswith("--rdzv_conf") for a in p.added_args)
    matcher = [s for s in p.patches if s.name == "host_matcher"]
    assert [s.data for s in matcher] == [{"host": "node0i", "is_local": this_node == 0}]
    assert p.is_host is (this_node == 0), "node ranks are not used"


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


def test_plan_is_pure() -> None:
    env = {"SLURM_NODEID": "2"}
    first = plan(env=env, facts=node(2))
    assert plan(env=dict(env), facts=node(2)) == first
    assert env == {"SLURM_NODEID": "2"}


def test_summary_names_every_change() -> None:
    text = plan(env={"SLURM_NODEID": "0"}).summary()
    assert text.startswith("torchrun_jsc: torch 2.13.0 (>=2.6)")
    for part in ("is_host=1", f"--local_addr={ib(0)}", "GLOO_SOCKET_IFNAME=ib"):
        assert part in text


def test_torch_2_5_shared_store_opt_out_respects_the_user() -> None:
    given = plan(
        env={"SLURM_NODEID": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
        version="2.5.1",
        facts=node(1),
    )
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in dict(given.env)
    off = plan(
        env={"SLURM_NODEID": "1", "TORCHRUN_JSC_FIX_TORCH_BUGS": "0"},
        version="2.5.1",
        facts=node(1),
    )
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in dict(off.env)
    assert any("cannot restart workers" in w for w in off.warnings)
    untouched = plan(["--standalone", *SCRIPT], version="2.5.1")
    assert untouched.env == ()


def test_bad_is_host_is_reported_before_look_ups_even_for_a_loopback_endpoint() -> None:
    argv = ["--rdzv_backend=c10d", "--rdzv_endpoint=localhost:1", "--rdzv_conf=is_host=2", *SCRIPT]
    with pytest.raises(ConfigError, match="is_host='2' is not valid"):
        request(argv)
