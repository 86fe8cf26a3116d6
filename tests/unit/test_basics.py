"""Tables for the small pure pieces: settings, endpoints, rendezvous conf, versions."""

from __future__ import annotations

import pytest

from torchrun_jsc import launch_args, network
from torchrun_jsc.errors import ConfigError, UnsupportedTorchError
from torchrun_jsc.settings import VARIABLES, Settings
from torchrun_jsc.versions import (
    STRATEGIES,
    TORCH_BUGS,
    TorchVersion,
    bugs_for,
    is_untested,
    strategy_for,
)


@pytest.mark.parametrize(
    ("endpoint", "host", "port"),
    [
        ("node0i:29500", "node0i", 29500),
        ("node0i", "node0i", None),
        ("10.78.0.10:1", "10.78.0.10", 1),
        ("[fd00:78::a]:29500", "fd00:78::a", 29500),
        ("[fd00:78::a]", "fd00:78::a", None),
        ("[fe80::1%ib0]:5", "fe80::1%ib0", 5),
        (" jwb0001i.juwels:0 ", "jwb0001i.juwels", 0),
    ],
)
def test_split_endpoint(endpoint: str, host: str, port: object) -> None:
    assert network.split_endpoint(endpoint) == (host, port)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("[fd00::1:29500", "unclosed '\\['"),
        ("[fd00::1]x", "text after '\\]'"),
        ("fd00::1", "needs brackets"),
        (":29500", "no host"),
        ("h:70000", "port '70000'"),
        ("h:", "port ''"),
    ],
)
def test_split_endpoint_errors(endpoint: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        network.split_endpoint(endpoint)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.5", True),
        ("::1", True),
        ("0:0:0:0:0:0:0:1", True),
        ("node0i", False),
        ("10.0.0.1", False),
        ("fd00::1", False),
    ],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert network.is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("text", "conf"),
    [
        ("", {}),
        ("a=1", {"a": "1"}),
        (" a = 1 , b=x=y ", {"a": "1", "b": "x=y"}),
        ("a=1,a=2", {"a": "2"}),
    ],
)
def test_rdzv_conf_round_trip(text: str, conf: dict[str, str]) -> None:
    assert launch_args.parse_rdzv_conf(text) == conf
    assert launch_args.parse_rdzv_conf(launch_args.format_rdzv_conf(conf)) == conf


@pytest.mark.parametrize("text", ["a", "=1", "a=", "a=1,,b=2", "a=1,"])
def test_rdzv_conf_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        launch_args.parse_rdzv_conf(text)


@pytest.mark.parametrize(
    ("value", "result"),
    [
        ("1", True),
        ("TRUE", True),
        ("t", True),
        ("Yes", True),
        ("y", True),
        ("0", False),
        ("false", False),
        ("F", False),
        ("no", False),
        ("N", False),
    ],
)
def test_torch_bool(value: str, result: bool) -> None:
    assert launch_args.parse_torch_bool("is_host", value) is result


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("2.13.0+cpu", (2, 13)),
        ("1.13.0a0", (1, 13)),
        ("2.15.0.dev20260101", (2, 15)),
        ("2.11.0+cu130", (2, 11)),
        ("3.0", (3, 0)),
        ("v1.9.1", (1, 9)),
    ],
)
def test_version_parse(text: str, key: tuple[int, int]) -> None:
    assert TorchVersion.parse(text).key == key
    assert str(TorchVersion.parse(text)) == text


def test_version_parse_error() -> None:
    with pytest.raises(UnsupportedTorchError, match="cannot read the torch version 'nightly'"):
        TorchVersion.parse("nightly")


def test_strategy_table_covers_every_version_once() -> None:
    for major, minors in ((1, range(9, 14)), (2, range(0, 16)), (3, range(0, 3))):
        for minor in minors:
            version = TorchVersion(major, minor)
            rows = [s for s in STRATEGIES if s.contains(version)]
            assert len(rows) == 1, version
            assert strategy_for(version) is rows[0]
    assert [s.label for s in STRATEGIES] == [
        ">=1.9,<2.0",
        ">=2.0,<2.4",
        ">=2.4,<2.5",
        ">=2.5,<2.6",
        ">=2.6",
    ]


def test_releases_newer_than_the_newest_tested_one_are_untested() -> None:
    assert not is_untested(TorchVersion(2, 15, 9))
    assert is_untested(TorchVersion(2, 16)) and is_untested(TorchVersion(3, 0))


@pytest.mark.parametrize(
    ("version", "python", "bugs"),
    [
        ("1.13.1", (3, 11), ["std_from_str"]),
        ("1.13.1", (3, 10), []),
        ("2.0.1", (3, 11), []),
        ("2.3.1", (3, 9), ["keep_rendezvous"]),
        ("2.5.1", (3, 11), ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]),
        ("2.6.0", (3, 11), []),
    ],
)
def test_torch_bugs_by_version(version: str, python: tuple[int, int], bugs: list[str]) -> None:
    found = [b.patch or (b.env or ("?",))[0] for b in bugs_for(TorchVersion.parse(version), python)]
    assert found == bugs
    for bug in TORCH_BUGS:
        assert (bug.patch is None) != (bug.env is None), bug.label


def test_settings_defaults() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert s.node_rank is None and s.prefer_arg_patching and not s.prefer_old_solution


def test_settings_read_everything() -> None:
    s = Settings.from_env(
        {
            "TORCHRUN_JSC_PREFER_ARG_PATCHING": "0",
            "TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1",
            "TORCHRUN_JSC_NODE_RANK": " 3 ",
            "TORCHRUN_JSC_HOST_NODE_RANK": "2",
            "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS": "0",
            "TORCHRUN_JSC_SET_SOCKET_IFNAME": "0",
            "TORCHRUN_JSC_HOST_BY_ADDRESS": "0",
            "TORCHRUN_JSC_FIX_TORCH_BUGS": "0",
            "TORCHRUN_JSC_RESOLVE_TIMEOUT": "0.5",
            "TORCHRUN_JSC_EXPLAIN": "json",
            "SLURM_NODEID": "7",
        }
    )
    assert s == Settings(
        False, True, 3, "TORCHRUN_JSC_NODE_RANK", 2, False, False, False, False, 0.5, "json"
    )


def test_empty_value_counts_as_unset() -> None:
    s = Settings.from_env({"TORCHRUN_JSC_NODE_RANK": "", "SLURM_NODEID": "4"})
    assert (s.node_rank, s.node_rank_source) == (4, "SLURM_NODEID")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_resolve_timeout_rejects(value: str) -> None:
    with pytest.raises(ConfigError, match="accepted: a number of seconds >= 0"):
        Settings.from_env({"TORCHRUN_JSC_RESOLVE_TIMEOUT": value})


def test_every_variable_is_documented_in_the_readme() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for variable in VARIABLES:
        assert f"`{variable.name}`" in readme, variable.name
