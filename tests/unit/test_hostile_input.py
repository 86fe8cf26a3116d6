"""Hostile input on the launch side: values torch refuses late (with a traceback) or reads in an
unexpected way, reported in one line that names what the user set; huge values cut; bytes that
are not UTF-8 printed escaped. No machine is looked at (node facts are built by hand)."""

from __future__ import annotations

import argparse
from typing import Dict, List

import pytest

from torchrun_jsc import explain, facts, handover
from torchrun_jsc.errors import ConfigError
from torchrun_jsc.plan import Prepared, make_plan
from torchrun_jsc.settings.table import Settings
from torchrun_jsc.torch_cli import CommandLine, TorchCli

from .layouts import ib, ib6, node
from .planning import plan, request

pytest.importorskip("torch.distributed.run")

SCRIPT = ["train.py"]
MULTI = ["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node0i:29500"]
ONE_NODE = ["--standalone"]
#: Leaves --nnodes and --rdzv_endpoint to the row (a PET_* variable gives only what the command
#: line does not).
C10D = ["--rdzv_backend=c10d"]


# --------------------------------------------------------------------------------- one-line errors


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        # LOGLEVEL: torch passes it to logging's setLevel, which takes upper-case names only
        ({"LOGLEVEL": "info"}, ONE_NODE, r"^LOGLEVEL='info' is not valid; accepted: DEBUG, INFO,"),
        ({"LOGLEVEL": "10"}, ONE_NODE, r"^LOGLEVEL='10' is not valid; accepted: DEBUG"),
        ({"LOGLEVEL": ""}, ONE_NODE, r"^LOGLEVEL='' is not valid; accepted: DEBUG"),
        # the variable the user set is named, not the option it stands for
        ({"PET_NNODES": "0"}, [], r"^PET_NNODES='0' is not valid; accepted: N or MIN:MAX"),
        ({"PET_NNODES": "2:1"}, [], r"^PET_NNODES='2:1' is not valid; accepted: N or MIN:MAX"),
        ({"PET_NNODES": "2"}, ["--nnodes=0"], r"^--nnodes='0' is not valid; accepted: N or MIN"),
        ({"PET_MAX_RESTARTS": "-1"}, [], r"^PET_MAX_RESTARTS='-1' is not valid; accepted: an int"),
        # --nproc_per_node as torch reads it (int()); torch's agent asserts a count >= 1
        ({}, ["--nproc_per_node=0"], r"^--nproc_per_node='0' is not valid; accepted: an integer"),
        ({}, ["--nproc-per-node", "-1"], r"^--nproc_per_node='-1' is not valid; accepted: an"),
        ({}, ["--nproc_per_node= -0 "], r"^--nproc_per_node=' -0 ' is not valid"),
        ({"PET_NPROC_PER_NODE": "0"}, [], r"^PET_NPROC_PER_NODE='0' is not valid; accepted: an"),
        # endpoints torch's parse_rendezvous_endpoint refuses
        ({}, ["--rdzv_endpoint=[fe80::1%ib0]:29500"], r"torch takes no '%zone' in an endpoint"),
        ({}, ["--rdzv_endpoint=node0i:029500"], r"port '029500' is not an integer in 0\.\.65535"),
        ({"PET_RDZV_ENDPOINT": "fd00::1"}, [], r"an IPv6 address needs brackets"),
    ],
    ids=[
        "loglevel-lower",
        "loglevel-number",
        "loglevel-empty",
        "pet-nnodes-0",
        "pet-nnodes-reversed",
        "nnodes-line-wins",
        "pet-max-restarts",
        "nproc-0",
        "nproc-negative",
        "nproc-blank-zero",
        "pet-nproc-0",
        "endpoint-zone",
        "endpoint-6-digit-port",
        "pet-endpoint-ipv6",
    ],
)
def test_bad_value_is_one_line_naming_what_was_set(
    env: Dict[str, str], argv: List[str], message: str
) -> None:
    base = [] if argv == ONE_NODE else C10D
    with pytest.raises(ConfigError, match=message) as info:
        request([*base, *argv, *SCRIPT], env)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("level", ["INFO", "DEBUG", "WARN", "CRITICAL"])
def test_log_levels_torch_takes_are_accepted(level: str) -> None:
    assert request([*ONE_NODE, *SCRIPT], {"LOGLEVEL": level}).options is not None


class _Broken(TorchCli):
    """torch's parser module failing to load for a reason that is no PET_* variable."""

    def parser(self) -> argparse.ArgumentParser:
        raise ValueError("Unknown level: 'verbose'")


def test_an_error_loading_torchs_parser_is_not_blamed_on_a_pet_flag() -> None:
    with pytest.raises(ConfigError) as info:
        CommandLine({}, _Broken())
    assert str(info.value) == (
        "torch.distributed.run cannot be loaded: ValueError \"Unknown level: 'verbose'\""
    )


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--rdzv_endpoint=" + "a" * 100_000 + ":29500"], {}),
        (["--rdzv_endpoint=" + "a" * 100_000 + ":x"], {}),
        (["--rdzv_endpoint=node0i:" + "9" * 100_000], {}),
        (["--nnodes=" + "1:" * 50_000], {}),
        (["--rdzv_conf=join_timeout=" + "x" * 100_000], {}),
        (["--rdzv_conf=is_host=" + "x" * 100_000], {}),
        (["--rdzv_conf=" + "x" * 100_000], {}),
        ([], {"PET_NNODES": "0" * 100_000}),
        ([], {"PET_STANDALONE": "y" * 100_000}),
        ([], {"LOGLEVEL": "v" * 100_000}),
    ],
    ids=[
        "endpoint-host",
        "endpoint-port-word",
        "endpoint-port-digits",
        "nnodes",
        "conf-int",
        "conf-bool",
        "conf-pair",
        "pet-nnodes",
        "pet-flag",
        "loglevel",
    ],
)
def test_a_huge_value_is_cut_in_the_message(argv: List[str], env: Dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        request([*C10D, *argv, *SCRIPT], env)
    text = str(info.value)
    assert len(text) < 500 and "\n" not in text, text[:600]
    assert "'..." in text, "the value is shown cut, as the other messages show it"


# -------------------------------------------------------------------------- --nproc_per_node words


def test_torch_reads_nproc_per_node_words_on_this_node() -> None:
    import os

    import torch

    cli = TorchCli()
    assert cli.local_world_size("two") == (None, "Unsupported nproc_per_node value: two")
    assert cli.local_world_size("cpu")[0] == len(os.sched_getaffinity(0)) or os.cpu_count()
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the no-device answer cannot be seen here")
    assert cli.local_world_size("gpu") == (None, "Cuda is not available.")


@pytest.mark.parametrize(
    ("argv", "env", "refused", "message"),
    [
        (
            ["--nproc_per_node=gpu"],
            {},
            "Cuda is not available.",
            "--nproc_per_node='gpu' is not valid: this node has no CUDA device; accepted: an"
            " integer >= 1, or cpu, gpu, auto (or another device this torch knows)",
        ),
        (
            [],
            {"PET_NPROC_PER_NODE": "gpu"},
            "Cuda is not available.",
            "PET_NPROC_PER_NODE='gpu' is not valid: this node has no CUDA device; accepted:",
        ),
        (
            ["--nproc_per_node=two"],
            {},
            "Unsupported nproc_per_node value: two",
            "--nproc_per_node='two' is not valid: torch 2.13.0 knows no such device; accepted:",
        ),
    ],
    ids=["gpu", "pet-gpu", "two"],
)
def test_nproc_word_torch_refuses_here_stops_the_launch_and_explain_says_so(
    argv: List[str], env: Dict[str, str], refused: str, message: str
) -> None:
    req = request([*ONE_NODE, *argv, *SCRIPT], env)
    assert req.nproc_word is not None
    here = node(0)._replace(local_world_size_error=refused)
    p = make_plan(req, "2.13.0", here)
    assert p.error is not None and p.error.startswith(message)
    assert "\n" not in p.error
    assert p.verdict == "error" and not p.predicted_failures
    text = explain.render(Prepared(req, here, p), "text")
    assert f"  ERROR: {p.error}" in text.splitlines()
    assert text.endswith("verdict: error")


def test_nproc_word_torch_takes_here_launches() -> None:
    req = request([*ONE_NODE, "--nproc_per_node=auto", *SCRIPT])
    assert req.nproc_word == "auto"
    p = make_plan(req, "2.13.0", node(0)._replace(local_world_size=4))
    assert p.error is None and not p.predicted_failures
    assert request([*ONE_NODE, "--nproc_per_node=+2", *SCRIPT]).nproc_word is None


# --------------------------------------------------------------- --rdzv_endpoint as torch reads it


@pytest.mark.parametrize(
    ("endpoint", "facts_of_node1", "note"),
    [
        (
            "fd00:78::10:29500",
            node(1, endpoint_host="fd00:78::10", endpoint_addresses=(ib6(0),)),
            "--rdzv_endpoint 'fd00:78::10:29500' has no brackets: torch reads it as host"
            " fd00:78::10, port 29500; write [fd00:78::10]:29500",
        ),
        (
            "::1:29400",
            node(1, endpoint_host=None, endpoint_addresses=()),
            "--rdzv_endpoint '::1:29400' has no brackets: torch reads it as host ::1, port 29400;"
            " write [::1]:29400",
        ),
    ],
    ids=["ipv6-node", "loopback"],
)
def test_unbracketed_ipv6_endpoint_runs_as_with_torchrun_and_warns(
    endpoint: str, facts_of_node1: facts.NodeFacts, note: str
) -> None:
    argv = ["--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", *SCRIPT]
    p = plan(argv, {"SLURM_NODEID": "1"}, facts=facts_of_node1)
    assert note in p.warnings
    assert f"--rdzv_endpoint={endpoint}" in p.argv, "the endpoint reaches torch as given"
    assert not p.predicted_failures and p.error is None


# ------------------------------------------------------------------ --local_addr and the interface


def test_user_local_addr_that_does_not_resolve_is_kept_with_a_warning() -> None:
    here = node(1)._replace(local_addr_error="Name or service not known")
    p = plan([*MULTI, "--local_addr=garbage", *SCRIPT], {"SLURM_NODEID": "1"}, facts=here)
    assert p.advertised_address is not None
    assert "--local_addr=garbage" not in p.added_args and "--local_addr=garbage" in p.argv
    assert (
        "--local_addr 'garbage' does not resolve on node1 (Name or service not known); kept as"
        " given, but the other nodes cannot reach this node by it"
    ) in p.warnings


def test_user_local_addr_of_another_machine_is_kept_with_a_warning() -> None:
    here = node(1)._replace(local_addr_addresses=(ib(2),), local_addr_own=())
    p = plan([*MULTI, f"--local_addr={ib(2)}", *SCRIPT], {"SLURM_NODEID": "1"}, facts=here)
    assert any(
        w.startswith(f"--local_addr '{ib(2)}' ({ib(2)}) is not an address of node1; kept")
        for w in p.warnings
    ), p.warnings
    mine = node(1)._replace(local_addr_addresses=(ib(1),), local_addr_own=(ib(1),))
    ok = plan([*MULTI, f"--local_addr={ib(1)}", *SCRIPT], {"SLURM_NODEID": "1"}, facts=mine)
    assert not any("--local_addr" in w for w in ok.warnings)


@pytest.mark.parametrize(
    ("given", "found"),
    [
        ("a b", ((), "'a b' is not a host name")),
        ("a..b", ((), "'a..b' is not a host name (empty label or a label over 63 characters)")),
        ("10.78.0.11", (("10.78.0.11",), None)),
    ],
)
def test_local_addr_look_up_needs_no_network_for_garbage_or_an_address(
    given: str, found: object
) -> None:
    assert facts._look_up_once(given) == found


def test_gloo_ifname_message_calls_this_nodes_address_its_own() -> None:
    env = {"SLURM_NODEID": "1", "GLOO_SOCKET_IFNAME": "mgmt"}
    p = plan([*MULTI, *SCRIPT], env, facts=node(1))
    assert p.predicted_failures == (
        f"GLOO_SOCKET_IFNAME=mgmt does not select ib, the interface of {ib(1)} (this node's"
        " address towards the endpoint node0i); interfaces here: ib, lo, mgmt; unset it or set"
        " GLOO_SOCKET_IFNAME=ib",
    )


# ------------------------------------------------------------------------ bytes that are not UTF-8


def test_explain_text_prints_bytes_that_are_not_utf8_escaped() -> None:
    argv = [*ONE_NODE, "tr\udcffin.py", "--x=\udcc3"]
    req = request(argv)
    p = make_plan(req, "2.13.0", node(0))
    text = explain.render(Prepared(req, node(0), p), "text")
    text.encode("utf-8")  # strict: no lone surrogate left
    assert "'tr\\xffin.py' '--x=\\xc3'" in text


def test_explain_error_prints_a_variable_name_that_is_not_utf8_escaped() -> None:
    with pytest.raises(ConfigError) as info:
        request([*ONE_NODE, *SCRIPT], {"TORCHRUN_JSC_\udcff": "1"})
    text = explain.render_error(str(info.value), "text")
    text.encode("utf-8")
    assert text.startswith("torchrun_jsc explain: error: unknown variable TORCHRUN_JSC_\\xff;")
    assert explain.escaped("\ud800 ü") == "\\ud800 ü", "other lone surrogates; valid text kept"


# ------------------------------------------------------------------------ names and small values


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "torchrun_jsc_explain",
            "unknown variable torchrun_jsc_explain: names are upper case, so it would change"
            " nothing; accepted: TORCHRUN_JSC_EXPLAIN",
        ),
        ("Torchrun_Jsc_Guards", "accepted: TORCHRUN_JSC_GUARDS"),
        ("torchrun_jsc_handover", "accepted: TORCHRUN_JSC_HANDOVER"),
        ("torchrun_jsc_noderank", "unknown variable torchrun_jsc_noderank; known: TORCHRUN_JSC_"),
    ],
    ids=["explain", "mixed-case", "internal", "misspelt"],
)
def test_a_setting_in_the_wrong_case_is_refused_as_unknown(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        request([*ONE_NODE, *SCRIPT], {name: "text"})
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["none", "None", "NONE"])
def test_host_suffix_none_is_no_suffix_in_any_case(value: str) -> None:
    assert Settings.from_env({"TORCHRUN_JSC_HOST_SUFFIX": value}).host_suffix == ""
    assert Settings.from_env({"TORCHRUN_JSC_HOST_SUFFIX": "null"}).host_suffix == "null"


_HANDED = handover.Handover(
    endpoint="10.78.0.11:29500", host_node_rank=1, restart=1, lost="node0", wait=150.0
)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("endpoint", "10.78.0.11:99999"),
        ("endpoint", "0.0.0.0:29500"),
        ("endpoint", "10.78.0.11:0"),
        ("endpoint", "a b:29500"),
        ("wait", float("inf")),
        ("wait", float("nan")),
    ],
    ids=["port", "wildcard", "port-0", "host", "wait-infinity", "wait-nan"],
)
def test_a_bad_handover_is_blamed_on_its_variable(field: str, value: object) -> None:
    text = handover.encode(_HANDED._replace(**{field: value}))
    with pytest.raises(ConfigError) as info:
        request([*MULTI, *SCRIPT], {handover.VARIABLE: text, "SLURM_NODEID": "1"})
    message = str(info.value)
    assert message.startswith(f"TORCHRUN_JSC_HANDOVER: {field} "), message
    assert "--rdzv_endpoint" not in message and "\n" not in message


# ------------------------------------------------------------------ a Slurm step without its count


def test_a_step_without_a_node_count_is_counted_from_its_node_list() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node[0-3]"}
    p = plan([*ONE_NODE, *SCRIPT], env)
    assert any(w.startswith("this Slurm step spans 4 nodes") for w in p.warnings), p.warnings
    assert "--nnodes=4 --rdzv_backend=c10d" in " ".join(p.warnings)
    assert not any("None" in w for w in p.warnings), p.warnings
    outside = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[0-3]"}
    refused = plan(["--nnodes=4", *C10D, "--rdzv_endpoint=node0i:29500", *SCRIPT], outside)
    assert refused.refusal is not None and "in a 4-node allocation" in refused.refusal


# ------------------------------------------------------------------- rendezvous timeouts as torch


@pytest.mark.parametrize(
    "key",
    ["join_timeout", "read_timeout", "last_call_timeout", "close_timeout", "heartbeat_timeout"],
)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", ": torch stops on a timeout below 1 s"),
        ("-5", ": torch stops on a timeout below 1 s"),
        ("-0", ": torch stops on a timeout below 1 s"),
        ("9" * 20, ": too long for torch"),
        ("5s", ""),
        ("1.5", ""),
    ],
    ids=["zero", "negative", "minus-zero", "huge", "unit", "fraction"],
)
def test_a_rendezvous_timeout_torch_stops_on_is_refused(key: str, value: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        request([*MULTI, f"--rdzv_conf={key}={value}", *SCRIPT])
    assert str(info.value) == (
        f"--rdzv_conf {key}={value!r} is not valid{why}; accepted: whole seconds in"
        " 1..86399999999999 as torch reads them with int() (+5 and 1_0 too)"
    )


def test_a_rendezvous_timeout_torch_stops_on_is_refused_with_standalone_too() -> None:
    """``--standalone`` makes torch's c10d rendezvous on a local port with the same conf."""
    with pytest.raises(ConfigError, match="join_timeout='0' is not valid: torch stops on"):
        request(["--standalone", "--rdzv_conf=join_timeout=0", *SCRIPT])
    req = request(["--standalone", "--rdzv_conf=join_timeout=+5", *SCRIPT])
    assert req.options is not None and req.options.standalone


@pytest.mark.parametrize(
    ("value", "seconds"), [("+5", 5), ("1_0", 10), ("007", 7), ("\u0665", 5), ("1", 1)]
)
def test_a_rendezvous_timeout_torch_takes_is_taken_with_its_meaning(
    value: str, seconds: int
) -> None:
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous.api import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

    conf = f"join_timeout={value},read_timeout={value}"
    req = request([*MULTI, f"--rdzv_conf={conf}", *SCRIPT])
    assert req.conf_seconds("join_timeout") == req.conf_seconds("read_timeout") == seconds
    params = RendezvousParameters("c10d", "node0i:29500", "r", 2, 2, **req.conf)
    assert params.get_as_int("join_timeout") == seconds, "torch's reading, the same"
    assert RendezvousTimeout(join=timedelta(seconds=seconds)).join.total_seconds() == seconds
    p = plan([*MULTI, f"--rdzv_conf={conf}", *SCRIPT], {"SLURM_NODEID": "1"}, facts=node(1))
    assert p.verdict == "ok", p.problems


# ------------------------------------------------------------------------ signals, as torch reads


_SIGNALS_ACCEPTED = (
    "accepted: comma-separated signal names as Python's signal module spells them (upper case,"
    " with SIG: SIGTERM,SIGUSR1), not SIGKILL or SIGSTOP"
)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            "sigusr1",
            "torch cannot register 'sigusr1', so that signal would not be handled (names are as"
            " Python spells them: SIGUSR1)",
        ),
        (
            "SIGTERM,USR2",
            "torch cannot register 'USR2', so that signal would not be handled (names are as"
            " Python spells them: SIGUSR2)",
        ),
        ("SIGTERM,,SIGINT", "torch cannot register an empty name, so that signal would not be"),
        ("10", "torch cannot register '10', so that signal would not be handled;"),
        ("SIGTERM,SIGKILL", "SIGKILL cannot be handled (torch's agent would stop with OSError)"),
        ("SIGSTOP", "SIGSTOP cannot be handled (torch's agent would stop with OSError)"),
    ],
    ids=["lower-case", "no-sig", "empty-item", "number", "sigkill", "sigstop"],
)
def test_signals_torch_cannot_handle_are_refused(value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        request([*MULTI, f"--signals-to-handle={value}", *SCRIPT])
    message = str(info.value)
    assert message.startswith(f"--signals_to_handle={value!r} is not valid: {reason}"), message
    assert message.endswith(_SIGNALS_ACCEPTED) and "\n" not in message


def test_a_pet_signal_list_is_blamed_on_its_variable() -> None:
    with pytest.raises(ConfigError, match=r"^PET_SIGNALS_TO_HANDLE='sigterm' is not valid"):
        request([*MULTI, *SCRIPT], {"PET_SIGNALS_TO_HANDLE": "sigterm"})


@pytest.mark.parametrize("value", ["SIGTERM, SIGUSR1 ", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGRTMIN"])
def test_signals_torch_registers_are_taken(value: str) -> None:
    p = plan(
        [*MULTI, f"--signals-to-handle={value}", *SCRIPT], {"SLURM_NODEID": "1"}, facts=node(1)
    )
    assert p.verdict == "ok", p.problems


_REQUEUE = {"SLURM_JOB_ID": "12", "SLURM_NODEID": "1", "TORCHRUN_JSC_REQUEUE": "1"}


@pytest.mark.parametrize(
    ("env", "argv", "message"),
    [
        (
            {"TORCHRUN_JSC_REQUEUE_SIGNAL": "USR2"},
            ["--signals-to-handle=SIGTERM,SIGUSR2"],
            "TORCHRUN_JSC_REQUEUE=1 with --signals_to_handle='SIGTERM,SIGUSR2': torch would"
            " handle SIGUSR2 itself and stop the workers on it, so the job would never be"
            " requeued; accepted: a --signals_to_handle without SIGUSR2 (torch's default is"
            " SIGTERM,SIGINT,SIGHUP,SIGQUIT), or TORCHRUN_JSC_REQUEUE_SIGNAL naming the other"
            " warning signal",
        ),
        (
            {},
            ["--signals-to-handle= SIGUSR1 ,SIGTERM"],
            "TORCHRUN_JSC_REQUEUE=1 with --signals_to_handle=' SIGUSR1 ,SIGTERM': torch would"
            " handle SIGUSR1 itself",
        ),
        (
            {"TORCHRUN_JSC_FORWARD_SIGNALS": "none"},
            [],
            "TORCHRUN_JSC_REQUEUE=1 with TORCHRUN_JSC_FORWARD_SIGNALS='none': the agent would not"
            " pass SIGUSR1 (TORCHRUN_JSC_REQUEUE_SIGNAL) on, so the workers would never be told"
            " to save before the requeue; accepted: a TORCHRUN_JSC_FORWARD_SIGNALS that includes"
            " USR1 (the default is USR1,USR2), or TORCHRUN_JSC_REQUEUE=0",
        ),
        (
            {"TORCHRUN_JSC_FORWARD_SIGNALS": "USR1", "TORCHRUN_JSC_REQUEUE_SIGNAL": "USR2"},
            [],
            "TORCHRUN_JSC_REQUEUE=1 with TORCHRUN_JSC_FORWARD_SIGNALS='USR1': the agent would not"
            " pass SIGUSR2 (TORCHRUN_JSC_REQUEUE_SIGNAL) on",
        ),
    ],
    ids=["torch-handles-usr2", "torch-handles-usr1", "forward-none", "forward-without-it"],
)
def test_a_requeue_whose_signal_never_reaches_the_workers_is_refused(
    env: Dict[str, str], argv: List[str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        request([*MULTI, *argv, *SCRIPT], {**_REQUEUE, **env})
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_a_requeue_whose_signal_reaches_the_workers_goes_ahead() -> None:
    env = {
        **_REQUEUE,
        "TORCHRUN_JSC_FORWARD_SIGNALS": "USR2",
        "TORCHRUN_JSC_REQUEUE_SIGNAL": "USR2",
    }
    p = plan([*MULTI, "--signals-to-handle=SIGTERM,SIGUSR1", *SCRIPT], env, facts=node(1))
    assert p.verdict == "ok", p.problems
    assert any(d.topic == "requeue after SIGUSR2" for d in p.decisions)


# ------------------------------------------------- values torch's parser takes, then stops on


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["--monitor-interval=0"],
            {},
            "--monitor_interval='0.0' is not valid: torch's agent stops on it; accepted: seconds"
            " > 0, finite, at most 1e+09",
        ),
        (["--monitor_interval=-1"], {}, "--monitor_interval='-1.0' is not valid: torch's agent"),
        (["--monitor-interval=nan"], {}, "--monitor_interval='nan' is not valid: torch's agent"),
        (["--monitor-interval=inf"], {}, "--monitor_interval='inf' is not valid: torch's agent"),
        (["--monitor-interval=1e10"], {}, "--monitor_interval='10000000000.0' is not valid"),
        ([], {"PET_MONITOR_INTERVAL": "0"}, "PET_MONITOR_INTERVAL='0.0' is not valid"),
        (
            ["--rdzv_backend=C10D"],
            {},
            "--rdzv_backend='C10D' is not valid: torch knows c10d, in lower case; accepted: c10d,"
            " static, etcd, etcd-v2 (or a backend a torch plugin registers)",
        ),
        (["--rdzv_backend=Static"], {}, "--rdzv_backend='Static' is not valid: torch knows static"),
        (["--rdzv_backend= c10d"], {}, "--rdzv_backend=' c10d' is not valid: torch knows c10d"),
        (["--rdzv_backend="], {}, "--rdzv_backend='' is not valid: no backend has an empty name"),
        (
            ["--shutdown-timeout=-5"],
            {},
            "--shutdown_timeout='-5' is not valid: torch stops on a negative one; accepted: whole"
            " seconds >= 0",
        ),
        (
            ["--shutdown-timeout=20"],
            {"TORCHRUN_JSC_TERM_GRACE": "2"},
            "TORCHRUN_JSC_TERM_GRACE=2 and --shutdown_timeout=20 disagree: both set the grace"
            " between SIGTERM and SIGKILL, and TORCHRUN_JSC_TERM_GRACE would win; accepted: one"
            " of them, or the same value in both",
        ),
        (
            [],
            {"TORCHRUN_JSC_TERM_GRACE": "2.5", "PET_SHUTDOWN_TIMEOUT": "2"},
            "TORCHRUN_JSC_TERM_GRACE=2.5 and PET_SHUTDOWN_TIMEOUT=2 disagree",
        ),
    ],
    ids=[
        "monitor-0",
        "monitor-negative",
        "monitor-nan",
        "monitor-inf",
        "monitor-huge",
        "pet-monitor-0",
        "backend-upper",
        "backend-capital",
        "backend-blank",
        "backend-empty",
        "shutdown-negative",
        "grace-disagrees",
        "grace-disagrees-pet",
    ],
)
def test_values_torch_stops_on_later_are_refused_at_once(
    argv: List[str], env: Dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        request(["--nnodes=2", "--rdzv_endpoint=node0i:29500", *argv, *SCRIPT], env)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--monitor-interval=0.01", "--rdzv_backend=c10d"], {}),
        (["--rdzv_backend=my-plugin"], {}),
        (["--standalone", "--rdzv_backend=C10D"], {}),
        (["--rdzv_backend=c10d", "--shutdown-timeout=0"], {}),
        (["--rdzv_backend=c10d", "--shutdown-timeout=7"], {"TORCHRUN_JSC_TERM_GRACE": "7"}),
        (["--rdzv_backend=c10d"], {"TORCHRUN_JSC_TERM_GRACE": "2"}),
    ],
    ids=[
        "monitor-small",
        "plugin-backend",
        "standalone-replaces-it",
        "shutdown-0",
        "agree",
        "grace",
    ],
)
def test_values_torch_runs_with_go_ahead(argv: List[str], env: Dict[str, str]) -> None:
    nnodes = [] if "--standalone" in argv else ["--nnodes=2", "--rdzv_endpoint=node0i:29500"]
    p = plan([*nnodes, *argv, *SCRIPT], {"SLURM_NODEID": "1", **env}, facts=node(1))
    assert p.verdict == "ok", p.problems
