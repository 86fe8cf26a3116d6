"""Launches the pure plan leaves alone (single node, loopback endpoints, ...)."""

from __future__ import annotations

import pytest

from .layouts import node
from .planning import SCRIPT, patch_names, plan, request

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
