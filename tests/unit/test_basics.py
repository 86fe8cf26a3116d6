"""Tables for the small pure pieces: settings, endpoints, rendezvous conf, versions."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from torchrun_jsc import network, request
from torchrun_jsc.errors import ConfigError, UnsupportedTorchError
from torchrun_jsc.patches.params import name_of_type
from torchrun_jsc.settings.table import VARIABLES, Settings
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
        (" jwb0001i.juwels:0 ", "jwb0001i.juwels", 0),
        ("::1:29400", "::1", 29400),
        ("fd00::1:2", "fd00::1", 2),
        ("[node0i]:1", "node0i", 1),
        ("[10.78.0.10]", "10.78.0.10", None),
        ("h:00001", "h", 1),
        ("jwb0001i.juwels.:1", "jwb0001i.juwels.", 1),
        ("ümlaut.example:2", "ümlaut.example", 2),
        ("0.0.0.0:3", "0.0.0.0", 3),
    ],
)
def test_parse_endpoint(endpoint: str, host: str, port: object) -> None:
    found = network.parse_endpoint(endpoint)
    assert (found.host, found.port) == (host, port)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("[fd00::1:29500", "unclosed '\\['"),
        ("[fd00::1]x", "text after '\\]'"),
        ("a]:1", "brackets go around a whole IPv6 address only"),
        (
            "fd00::1",
            r"an IPv6 address needs brackets: \[IPV6\]:PORT \(torch reads host 'fd00:', port 1\)",
        ),
        ("node:1:2", "'node:1' \\(before the last ':'\\) is neither an address nor a host name"),
        ("[fe80::1%ib0]:5", "torch takes no '%zone' in an endpoint host"),
        ("h:000001", "port '000001' is not an integer in 0..65535 \\(at most 5 digits\\)"),
        (":29500", "no host"),
        ("h:70000", "port '70000'"),
        ("h:", "port ''"),
        ("h:\u00b2", "port '\u00b2' is not an integer"),
        ("h:\u0661\u0662\u0663", "port '\u0661\u0662\u0663' is not an integer"),
        ("a..b:1", "empty label or a label over 63"),
        (".:1", "empty label"),
        ("x" * 64 + ":1", "label over 63"),
        ("a" * 254, "host name of 254 characters"),
        ("a b:1", "is not a host name"),
        ("a+b:1", "'a\\+b' is not a host name: torch takes letters"),
    ],
)
def test_parse_endpoint_errors(endpoint: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        network.parse_endpoint(endpoint)
    text = str(info.value)
    assert "\n" not in text and "accepted: HOST[:PORT]" in text


@pytest.mark.parametrize(
    ("endpoint", "note"),
    [
        ("::1:29400", "torch reads it as host ::1, port 29400; write [::1]:29400"),
        (
            "fd00::1:2",
            "host fd00::1, port 2; write [fd00::1]:2 (for the address fd00::1:2, write"
            " [fd00::1:2]:PORT)",
        ),
        ("[::1]:29400", None),
        ("node0i:1", None),
    ],
)
def test_unbracketed_ipv6_and_port_is_read_as_torch_does_with_a_note(
    endpoint: str, note: object
) -> None:
    found = network.parse_endpoint(endpoint)
    if note is None:
        assert found.note is None
    else:
        assert found.note is not None and str(note) in found.note


def test_a_huge_endpoint_is_cut_in_the_message() -> None:
    with pytest.raises(ConfigError, match=r"host name of 100000 characters") as info:
        network.parse_endpoint("a" * 100_000 + ":1")
    assert len(str(info.value)) < 400
    with pytest.raises(ConfigError, match=r"^--rdzv_endpoint 'b{120}'\.\.\.: port") as info:
        network.parse_endpoint("b" * 100_000 + ":x")
    assert len(str(info.value)) < 400


endpoint_texts = st.text(alphabet="ab1:.[]%-_ \u00fc", max_size=12)


@settings(max_examples=400, deadline=None)
@given(endpoint_texts)
@example("[fe80::1%ib0]:1")
@example("h:000001")
def test_every_endpoint_accepted_is_read_as_torch_reads_it(text: str) -> None:
    """Whatever torch's ``parse_rendezvous_endpoint`` refuses is refused here (with one line
    instead of a traceback), and whatever is accepted here means to torch what it means here."""
    utils = pytest.importorskip("torch.distributed.elastic.rendezvous.utils")
    try:
        torch_host, torch_port = utils.parse_rendezvous_endpoint(text, -1)
    except ValueError:
        torch_host = None
    try:
        found = network.parse_endpoint(text)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert text.strip(), "blank is torch's localhost; the request never parses it"
    assert (found.host, found.port) == (torch_host, None if torch_port == -1 else torch_port)


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
    assert request.read_rdzv_conf(text) == conf
    assert request.read_rdzv_conf(request.format_rdzv_conf(conf)) == conf


@pytest.mark.parametrize("text", ["a", "=1", "a=", "a=1,,b=2", "a=1,"])
def test_rdzv_conf_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="is not KEY=VALUE"):
        request.read_rdzv_conf(text)


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
    assert request.torch_bool("is_host", value) is result


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
        ("1.13.1", (3, 11), ["std_from_str", "spare_wait"]),
        ("1.13.1", (3, 10), ["spare_wait"]),
        ("2.0.1", (3, 11), ["spare_wait"]),
        ("2.2.2", (3, 11), ["spare_wait"]),
        ("2.3.1", (3, 9), ["keep_rendezvous"]),
        ("2.5.1", (3, 11), ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]),
        ("2.6.0", (3, 11), ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]),
        ("2.15.0", (3, 11), ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]),
    ],
)
def test_torch_bugs_by_version(version: str, python: tuple[int, int], bugs: list[str]) -> None:
    found = [
        name_of_type(b.patch) if b.patch else (b.env or ("?",))[0]
        for b in bugs_for(TorchVersion.parse(version), python)
    ]
    assert found == bugs
    for bug in TORCH_BUGS:
        assert (bug.patch is None) != (bug.env is None), bug.label


def test_settings_defaults_come_from_the_table() -> None:
    s = Settings.defaults()
    for var in VARIABLES:
        assert getattr(s, var.field) == var.default, var.name
    assert s.prefer_arg_patching and not s.prefer_old_solution and s.node_rank is None
    assert (s.resolve_timeout, s.preflight_timeout) == (5.0, 20.0)


def test_settings_read_everything() -> None:
    s = Settings.from_env(
        {
            "TORCHRUN_JSC_PREFER_ARG_PATCHING": "0",
            "TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1",
            "TORCHRUN_JSC_NODE_RANK": "3",
            "TORCHRUN_JSC_HOST_NODE_RANK": "2",
            "TORCHRUN_JSC_ADVERTISE_OWN_ADDRESS": "0",
            "TORCHRUN_JSC_RESOLVE_TIMEOUT": "0.5",
            "TORCHRUN_JSC_EXPLAIN": "json",
        }
    )
    assert (s.prefer_arg_patching, s.prefer_old_solution, s.node_rank, s.host_node_rank) == (
        False,
        True,
        3,
        2,
    )
    assert (s.advertise_own_address, s.resolve_timeout, s.explain) == (False, 0.5, "json")


def test_empty_value_counts_as_unset() -> None:
    s = Settings.from_env({"TORCHRUN_JSC_NODE_RANK": " ", "TORCHRUN_JSC_RESOLVE_TIMEOUT": ""})
    assert (s.node_rank, s.resolve_timeout) == (None, 5.0)


@pytest.mark.parametrize(
    ("value", "meaning"),
    [
        ("1", True),
        ("0", False),
        ("2", True),
        ("-1", True),
        (" 1 ", True),
        ("00", False),
        ("1_0", True),
        ("true", True),
        ("False", False),
        ("YES", True),
        ("no", False),
        ("on", True),
        ("off", False),
    ],
)
def test_switches_accept_every_value_the_original_accepted(value: str, meaning: bool) -> None:
    """The original torchrun_jsc read its switches with bool(int(value))."""
    s = Settings.from_env({"TORCHRUN_JSC_PREFER_OLD_SOLUTION": value})
    assert s.prefer_old_solution is meaning


@pytest.mark.parametrize("value", ["maybe", "1.0", "0x1", "y", "t"])
def test_switches_reject_the_rest(value: str) -> None:
    with pytest.raises(ConfigError, match=r"TORCHRUN_JSC_PREFER_OLD_SOLUTION=.* is not valid"):
        Settings.from_env({"TORCHRUN_JSC_PREFER_OLD_SOLUTION": value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "-1"),
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "nan"),
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "inf"),
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "x"),
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "1e10"),
        ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "\u0661"),
        ("TORCHRUN_JSC_PREFLIGHT_TIMEOUT", "1e10"),
        ("TORCHRUN_JSC_PREFLIGHT_TIMEOUT", "0"),
        ("TORCHRUN_JSC_NODE_RANK", "1000001"),
        ("TORCHRUN_JSC_NODE_RANK", "\u00b2"),
        ("TORCHRUN_JSC_HOST_NODE_RANK", "+1"),
        ("TORCHRUN_JSC_HOST_SUFFIX", ".."),
        ("TORCHRUN_JSC_HOST_SUFFIX", "x" * 70),
    ],
)
def test_numbers_and_lists_have_bounds(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    message = str(info.value)
    assert message.startswith(f"{name}=") and "; accepted: " in message and "\n" not in message


def test_explain_and_preflight_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="both set; accepted: one of them"):
        Settings.from_env({"TORCHRUN_JSC_EXPLAIN": "text", "TORCHRUN_JSC_PREFLIGHT": "1"})


def test_the_readme_settings_table_is_the_generated_one() -> None:
    """One home for every default: the README's table is written from settings.VARIABLES."""
    from pathlib import Path

    from torchrun_jsc.settings.table import markdown_table

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("<!-- settings:begin", 1)[1].split("-->", 1)[1]
    block = block.split("<!-- settings:end -->", 1)[0].strip()
    assert block == markdown_table(), (
        "README settings table out of date; paste the output of "
        'python -c "from torchrun_jsc.settings.table import markdown_table as t; print(t())"'
    )
    for variable in VARIABLES:
        assert f"`{variable.name}`" in block and variable.short, variable.name


def test_the_events_doc_table_is_the_generated_one() -> None:
    """docs/events.md's table is written from events.entry.EVENTS."""
    from pathlib import Path

    from torchrun_jsc.runtime.events.entry import markdown_table

    doc = (Path(__file__).parents[2] / "docs" / "events.md").read_text()
    block = doc.split("<!-- events:begin", 1)[1].split("-->", 1)[1]
    block = block.split("<!-- events:end -->", 1)[0].strip()
    assert block == markdown_table(), (
        "docs/events.md is stale: paste the output of python -c"
        ' "from torchrun_jsc.runtime.events.entry import markdown_table as t; print(t())"'
    )
