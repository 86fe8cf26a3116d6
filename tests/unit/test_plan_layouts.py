"""The pure plan per cluster layout: which node is the host, which address and interface each
node advertises."""

from __future__ import annotations

from typing import Tuple

import pytest

from .layouts import ib, ib6, mgmt, node
from .planning import JSC, SCRIPT, patch_names, plan, request

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
