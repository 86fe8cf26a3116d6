"""Tests for torchrun_jsc.slurm's hostlists: expansion, the first host, bad lists (with
properties against a model)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchrun_jsc.errors import ConfigError
from torchrun_jsc.slurm import MAX_HOSTS, HostlistError, SlurmStep, expand_hostlist, first_host

# --------------------------------------------------------------------------- expand_hostlist

EXPAND_CASES = [
    pytest.param("", [], id="empty"),
    pytest.param("node1", ["node1"], id="plain"),
    pytest.param("a-b.c", ["a-b.c"], id="dash-dot"),
    pytest.param("login.cluster-1.example.org", ["login.cluster-1.example.org"], id="fqdn"),
    pytest.param("n1,n3,m2", ["n1", "n3", "m2"], id="plain-list"),
    pytest.param("lx[10-20]", [f"lx{i}" for i in range(10, 21)], id="man-lx10-20"),
    pytest.param(
        "linux[0-64,128]", [f"linux{i}" for i in range(65)] + ["linux128"], id="man-linux0-64,128"
    ),
    pytest.param("tux[2,1-2]", ["tux2", "tux1", "tux2"], id="man-duplicates-kept"),
    pytest.param("tux[1-3]", ["tux1", "tux2", "tux3"], id="man-tux1-3"),
    pytest.param("node[01-10]", [f"node{i:02d}" for i in range(1, 11)], id="padded"),
    pytest.param("node[001-003]", ["node001", "node002", "node003"], id="padded-3"),
    pytest.param("n[8-10]", ["n8", "n9", "n10"], id="unpadded-grows"),
    pytest.param("n[1-010]", [f"n{i}" for i in range(1, 11)], id="width-from-lower-bound"),
    pytest.param("n[098-101]", ["n098", "n099", "n100", "n101"], id="padded-grows"),
    pytest.param("n[5]", ["n5"], id="single-in-brackets"),
    pytest.param("n[007]", ["n007"], id="single-padded"),
    pytest.param("n[1,3-5,10]", ["n1", "n3", "n4", "n5", "n10"], id="mixed-list-range"),
    pytest.param("n[3-3]", ["n3"], id="one-element-range"),
    pytest.param("jwb[0001-0004]", [f"jwb{i:04d}" for i in range(1, 5)], id="jsc-juwels-booster"),
    pytest.param(
        "jrc[0100-0102,0200]", ["jrc0100", "jrc0101", "jrc0102", "jrc0200"], id="jsc-jureca"
    ),
    pytest.param("jwb[0001-0002]i", ["jwb0001i", "jwb0002i"], id="suffix-after-brackets"),
    pytest.param(
        "jwb[0001-0002].ib.example",
        ["jwb0001.ib.example", "jwb0002.ib.example"],
        id="domain-suffix",
    ),
    pytest.param(
        "rack[0-1]node[0-2]",
        ["rack0node0", "rack0node1", "rack0node2", "rack1node0", "rack1node1", "rack1node2"],
        id="man-multi-dimensional",
    ),
    pytest.param(
        "rack[1-2]-node[01-02]",
        ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"],
        id="two-groups-slurm-order",
    ),
    pytest.param(
        "a[1-2]b[3,5]c[7]",
        ["a1b3c7", "a1b5c7", "a2b3c7", "a2b5c7"],
        id="three-groups",
    ),
    pytest.param("[1-3]", ["1", "2", "3"], id="no-prefix"),
    pytest.param("n1[0-2]", ["n10", "n11", "n12"], id="digits-before-brackets"),
    pytest.param(
        "n[1-2],m[3-4],x",
        ["n1", "n2", "m3", "m4", "x"],
        id="commas-inside-and-between",
    ),
    pytest.param(
        "gpu-[1-2].a,cpu[01,03]",
        ["gpu-1.a", "gpu-2.a", "cpu01", "cpu03"],
        id="dash-before-brackets",
    ),
    pytest.param("n1,n1", ["n1", "n1"], id="duplicate-items-kept"),
    pytest.param("  n[1-2]\n", ["n1", "n2"], id="surrounding-whitespace"),
    pytest.param("n_x[1-2]", ["n_x1", "n_x2"], id="underscore"),
]


@pytest.mark.parametrize(("text", "expected"), EXPAND_CASES)
def test_expand_hostlist(text: str, expected: list[str]) -> None:
    assert expand_hostlist(text) == expected


@pytest.mark.parametrize(("text", "expected"), [c for c in EXPAND_CASES if c.values[1]])
def test_first_host_matches_expansion(text: str, expected: list[str]) -> None:
    assert first_host(text) == expected[0]


def test_expand_allows_exactly_max_hosts() -> None:
    hosts = expand_hostlist(f"n[1-{MAX_HOSTS}]")
    assert len(hosts) == MAX_HOSTS
    assert hosts[-1] == f"n{MAX_HOSTS}"


def test_first_host_does_not_expand_huge_product() -> None:
    # 300 x 300 = 90000 hosts is allowed; first_host must give the first without listing them.
    assert first_host("a[100-399]b[0100-0399]") == "a100b0100"


BAD_HOSTLISTS = [
    pytest.param("n[1-2", "'[' without matching ']'", id="unclosed"),
    pytest.param("n1-2]", "']' without matching '['", id="unopened"),
    pytest.param("n[1-2]]", "']' without matching '['", id="extra-close"),
    pytest.param("n[[1-2]]", "nested '['", id="nested"),
    pytest.param("n[5-3]", "range '5-3' is decreasing", id="reversed-range"),
    pytest.param("n[a-c]", "'a-c' is not a number or range", id="letters-in-range"),
    pytest.param("n[1-x]", "'1-x' is not a number or range", id="half-numeric"),
    pytest.param("n[1-2-3]", "'1-2-3' is not a number or range", id="double-dash"),
    pytest.param("n[-3]", "'-3' is not a number or range", id="negative"),
    pytest.param("n[1:4]", "'1:4' is not a number or range", id="step-syntax"),
    pytest.param("n[ 1]", "' 1' is not a number or range", id="space-in-brackets"),
    pytest.param("n[]", "empty brackets", id="empty-brackets"),
    pytest.param("n[1,,2]", "empty entry in brackets", id="empty-entry-in-brackets"),
    pytest.param("n[1,]", "empty entry in brackets", id="trailing-comma-in-brackets"),
    pytest.param("a,,b", "empty host name", id="double-comma"),
    pytest.param(",a", "empty host name", id="leading-comma"),
    pytest.param("a,", "empty host name", id="trailing-comma"),
    pytest.param(",", "empty host name", id="only-comma"),
    pytest.param("a b", "whitespace", id="inner-space"),
    pytest.param("a,\tb", "whitespace", id="tab"),
    pytest.param(f"n[0-{MAX_HOSTS}]", f"more than {MAX_HOSTS} hosts", id="range-too-large"),
    pytest.param("a[1-400]b[1-400]", f"more than {MAX_HOSTS} hosts", id="product-too-large"),
    pytest.param(f"a[1-{MAX_HOSTS}],b", f"more than {MAX_HOSTS} hosts", id="sum-too-large"),
    pytest.param("n[0-9999999999999999999]", "more than 18 digits", id="number-too-long"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_expand_hostlist_rejects(text: str, reason: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand_hostlist(text)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.text == text
    assert reason in info.value.reason


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_bad_nodelist_variable_is_one_line_naming_it(text: str, reason: str) -> None:
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": text})
    assert step is not None and step.nodelist is None
    with pytest.raises(ConfigError) as info:
        step.need("nodelist")
    message = str(info.value)
    assert message.startswith("SLURM_JOB_NODELIST=")
    assert reason in message and "accepted: comma-separated host names" in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "reason"), BAD_HOSTLISTS)
def test_first_host_rejects_what_expand_rejects(text: str, reason: str) -> None:
    with pytest.raises(HostlistError, match=re.escape(reason)):
        first_host(text)


@pytest.mark.parametrize("text", ["", "   "], ids=["empty", "blank"])
def test_first_host_of_empty_list(text: str) -> None:
    with pytest.raises(HostlistError, match="no hosts"):
        first_host(text)


def test_error_message_shortens_long_input() -> None:
    text = "n" * 500 + "[3-1]"
    step = SlurmStep.from_env({"SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": text})
    assert step is not None
    message = step.problem("nodelist")
    assert message is not None and len(message) < 400 and "..." in message


# --------------------------------------------------------------------------- properties

_name_chars = st.sampled_from("abcxyz-._")
_prefixes = st.text(_name_chars, min_size=0, max_size=4).map(lambda s: "h" + s)
_suffixes = st.sampled_from(["", "i", ".ib", "-gpu"])


@st.composite
def hostlist_expressions(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A random valid expression together with its expansion computed independently."""
    texts: list[str] = []
    expected: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        text_parts: list[str] = []
        options: list[list[str]] = []
        for _ in range(draw(st.integers(1, 3))):
            literal = draw(_prefixes)
            text_parts.append(literal)
            options.append([literal])
            if draw(st.booleans()):
                pieces: list[str] = []
                numbers: list[str] = []
                for _ in range(draw(st.integers(1, 3))):
                    width = draw(st.integers(1, 3))
                    lo = draw(st.integers(0, 120))
                    hi = lo + draw(st.integers(0, 3))
                    if lo == hi and draw(st.booleans()):
                        pieces.append(f"{lo:0{width}d}")
                    else:
                        pieces.append(f"{lo:0{width}d}-{hi:0{width}d}")
                    numbers.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
                text_parts.append("[" + ",".join(pieces) + "]")
                options.append(numbers)
        texts.append("".join(text_parts))
        names = [""]
        for choice in options:
            names = [name + c for name in names for c in choice]
        expected.extend(names)
    return ",".join(texts), expected


@given(hostlist_expressions())
def test_property_expand_matches_model(case: tuple[str, list[str]]) -> None:
    text, expected = case
    assert expand_hostlist(text) == expected


@given(hostlist_expressions())
def test_property_first_host_is_first_of_expansion(case: tuple[str, list[str]]) -> None:
    text, _ = case
    assert first_host(text) == expand_hostlist(text)[0]


@given(st.integers(0, 500), st.integers(1, 5))
def test_property_duplicates_never_collapsed(number: int, copies: int) -> None:
    text = "n[" + ",".join([str(number)] * copies) + "]"
    assert expand_hostlist(text) == [f"n{number}"] * copies


@given(st.integers(0, 10_000), st.integers(0, 50), st.integers(1, 6))
def test_property_range_length_and_padding(lo: int, extra: int, width: int) -> None:
    hosts = expand_hostlist(f"n[{lo:0{width}d}-{lo + extra:0{width}d}]")
    assert len(hosts) == extra + 1
    assert hosts == [f"n{n:0{width}d}" for n in range(lo, lo + extra + 1)]
