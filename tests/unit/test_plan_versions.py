"""The pure plan per torch version: how the address is advertised, the workarounds of torch's
bugs, unsupported releases."""

from __future__ import annotations

import pytest

from .layouts import ib, node
from .planning import ALL_VERSIONS, JSC, SCRIPT, patch_names, plan, script_args, start_patches

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


# ----------------------------------------------------------------------------- torch's bugs


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
