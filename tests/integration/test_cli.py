"""The command line for real, on this machine's loopback: real torch, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.unit.procs import stop_signals_default

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
WORKLOAD = str(HERE / "allreduce.py")
_LAUNCH = [sys.executable, "-m", "torchrun_jsc"]


def run(
    args: list[str], env: Optional[Dict[str, str]] = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_", "SLURM_"))
    }
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "torchrun_jsc", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_standalone_two_workers_all_reduce() -> None:
    out = run(["--standalone", "--nproc-per-node=2", WORKLOAD])
    assert out.returncode == 0, out.stderr[-2000:]
    results = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert sorted(r.split()[1] for r in results) == ["rank=0", "rank=1"]
    assert all("allreduce=3 expect=3" in r for r in results)
    assert all("gloo_ifname=None" in r for r in results), "standalone is left untouched"


def test_worker_failure_keeps_torchrun_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("raise SystemExit(7)\n")
    out = run(["--standalone", "--nproc-per-node=1", str(script)])
    assert out.returncode == 1, "torchrun reports a failed worker with exit code 1"
    assert "ChildFailedError" in out.stderr


def test_help_is_torchruns() -> None:
    out = run(["--help"])
    assert out.returncode == 0
    assert "--rdzv-endpoint" in out.stdout or "--rdzv_endpoint" in out.stdout


def test_usage_error_is_torchruns() -> None:
    out = run(["--no-such-option", WORKLOAD])
    assert out.returncode == 2
    assert "unrecognized arguments: --no-such-option" in out.stderr
    assert out.stderr.count("usage:") == 1, "reported once, by torchrun"


BAD = [
    (
        {"TORCHRUN_JSC_PREFER_ARG_PATCHING": "maybe"},
        [],
        "TORCHRUN_JSC_PREFER_ARG_PATCHING='maybe' is not valid; accepted: 0 or 1",
    ),
    (
        {"TORCHRUN_JSC_NODE_RANK": "abc"},
        [],
        "TORCHRUN_JSC_NODE_RANK='abc' is not valid; accepted: an integer in 0..1000000",
    ),
    (
        {"TORCHRUN_JSC_NODE_RANK": "-2"},
        [],
        "TORCHRUN_JSC_NODE_RANK='-2' is not valid; accepted: an integer in 0..1000000",
    ),
    (
        {},
        ["--rdzv_conf=is_host=maybe"],
        "--rdzv_conf is_host='maybe' is not valid; accepted: 1/0, true/false, t/f, yes/no, y/n",
    ),
    (
        {"TORCHRUN_JSC_RESOLVE_TIMEOUT": "1"},
        ["--rdzv_endpoint=no-such-host.invalid:29500"],
        "--rdzv_endpoint host 'no-such-host.invalid' does not resolve on",
    ),
    (
        {"LOGLEVEL": "info"},
        [],
        "LOGLEVEL='info' is not valid; accepted: DEBUG, INFO, WARNING, ERROR, CRITICAL",
    ),
    ({}, ["--nproc_per_node=0"], "--nproc_per_node='0' is not valid; accepted: an integer >= 1"),
]


@pytest.mark.parametrize(
    ("env", "extra", "message"),
    BAD,
    ids=["arg-patching", "rank-abc", "rank-negative", "is-host", "resolve", "loglevel", "nproc-0"],
)
def test_bad_input_one_line_exit_2_nothing_launched(
    tmp_path: Path, env: Dict[str, str], extra: list[str], message: str
) -> None:
    marker = tmp_path / "launched"
    script = tmp_path / "mark.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    args = [
        "--nnodes=1",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0i.invalid:29500",
        *extra,
        str(script),
    ]
    out = run(args, env=env, timeout=60)
    assert out.returncode == 2
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("torchrun_jsc")]
    assert len(ours) == 1, out.stderr
    assert ours[0].startswith(f"torchrun_jsc: error: {message}"), out.stderr
    assert out.stderr.splitlines()[-1] == ours[0], "the error is the last word"
    assert "Traceback" not in out.stderr
    assert not marker.exists()


def test_explain_json_without_launching(tmp_path: Path) -> None:
    out = run(
        ["--nnodes=2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:29500", WORKLOAD],
        env={"TORCHRUN_JSC_EXPLAIN": "json"},
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] == "ok"
    assert data["argv"][-1] == WORKLOAD
    assert any(d["value"] == "unchanged" for d in data["decisions"])


def test_explain_predicts_failure_with_nonzero_exit() -> None:
    out = run(
        ["--rdzv_backend=c10d", "--rdzv_endpoint=192.0.2.250:29500", WORKLOAD],
        env={"TORCHRUN_JSC_EXPLAIN": "text", "TORCHRUN_JSC_NODE_RANK": "0"},
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "WILL FAIL: this node would host the rendezvous store" in out.stdout
    assert "verdict: fail" in out.stdout


def test_apply_fixes_as_a_library(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("pass\n")
    code = (
        "import sys, torchrun_jsc\n"
        "sys.argv = ['x', '--rdzv_backend=c10d', '--rdzv_endpoint=localhost:1', 't.py']\n"
        "print(torchrun_jsc.apply_fixes(strict=True), torchrun_jsc.__version__, sys.argv)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    ok, version, argv = out.stdout.split(" ", 2)
    assert ok == "True"
    assert version.count(".") == 2
    assert "'t.py'" in argv


# --------------------------------------------------------------------------- argument shapes

#: A one-node Slurm step on this machine: auto-configuration adds options (c10d on localhost),
#: so where they land in the command line is tested with a real launch.
LOCAL_STEP = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "0",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NODELIST": "localhost",
    "SLURM_STEP_TASKS_PER_NODE": "1",
    "TORCHRUN_JSC_SLURM_AUTO": "1",
}


def worker_argvs(stdout: str) -> List[List[str]]:
    return [
        json.loads(line.split(" argv=", 1)[1])
        for line in stdout.splitlines()
        if line.startswith("RESULT") and " argv=" in line
    ]


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (["--", WORKLOAD, "a"], ["a"]),
        ([WORKLOAD, "--", "a"], ["a"]),
        ([WORKLOAD, "a", "--", "--nnodes=9"], ["a", "--", "--nnodes=9"]),
    ],
    ids=["dash-before-script", "dash-after-script", "dash-in-script-args"],
)
def test_dash_dash_anywhere_launches_with_the_added_options(
    shape: List[str], expected: List[str]
) -> None:
    out = run(["--nproc-per-node=2", *shape], env=LOCAL_STEP)
    assert out.returncode == 0, out.stderr[-3000:]
    argvs = worker_argvs(out.stdout)
    assert len(argvs) == 2 and all(a == expected for a in argvs), out.stdout
    assert all("allreduce=3 expect=3" in ln for ln in out.stdout.splitlines() if "RESULT" in ln)
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=1",
            *shape,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker_argvs(plain.stdout) == [expected], "exactly what plain torchrun gives"


# --------------------------------------------------------------------------- help, version, explain


def test_help_is_torchruns_then_the_settings() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "torchrun_jsc", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert out.stdout.startswith("usage: python -m torchrun_jsc "), out.stdout[:200]
    assert "--rdzv-endpoint" in out.stdout or "--rdzv_endpoint" in out.stdout
    assert "TORCHRUN_JSC_PREFER_ARG_PATCHING" in out.stdout.split("torchrun_jsc: the options")[1]


def test_version_before_the_script_is_the_launchers() -> None:
    import torch

    import torchrun_jsc

    out = run(["--version", "train.py"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(f"torchrun_jsc {torchrun_jsc.__version__} (torch ")
    assert str(torch.__version__) in out.stdout


def test_version_after_the_script_reaches_the_script(tmp_path: Path) -> None:
    script = tmp_path / "v.py"
    script.write_text("import sys; print('SCRIPT-ARGS', sys.argv[1:])\n")
    out = run(["--standalone", "--nproc-per-node=1", str(script), "--version"])
    assert out.returncode == 0, out.stderr
    assert "SCRIPT-ARGS ['--version']" in out.stdout


@pytest.mark.parametrize("style", ["text", "json"])
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--bogus", "t.py"], "unrecognized arguments: --bogus"),
        (["--nnodes=abc", "t.py"], "--nnodes='abc' is not valid"),
    ],
    ids=["usage-error", "nnodes"],
)
def test_explain_reports_torchruns_own_errors_in_its_format(
    style: str, args: List[str], words: str
) -> None:
    out = run(args, env={"TORCHRUN_JSC_EXPLAIN": style})
    assert out.returncode == 2, out.stdout + out.stderr
    if style == "json":
        data = json.loads(out.stdout)
        assert data["verdict"] == "error"
        assert words in (data.get("error") or "")
    else:
        assert "verdict: error" in out.stdout and words in out.stdout


def test_pet_flag_is_blamed_on_the_right_variable() -> None:
    out = run(["--nnodes=1", "t.py"], env={"PET_STANDALONE": "yes", "PET_RDZV_ENDPOINT": "h:1"})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "torchrun_jsc: error: PET_STANDALONE='yes' cannot be read by torchrun; accepted: an"
        " integer (0 or 1) for a flag"
    )


def test_nproc_per_node_gpu_without_a_cuda_device_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: --nproc_per_node=gpu works here")
    marker = tmp_path / "launched"
    script = tmp_path / "mark.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    words = "--nproc_per_node='gpu' is not valid: this node has no CUDA device; accepted:"
    out = run(["--standalone", "--nproc_per_node=gpu", str(script)])
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.splitlines()[-1].startswith(f"torchrun_jsc: error: {words}")
    assert "Traceback" not in out.stderr and not marker.exists()
    explained = run(
        ["--standalone", "--nproc_per_node=gpu", str(script)], {"TORCHRUN_JSC_EXPLAIN": "text"}
    )
    assert explained.returncode == 2, "a plan error (explain: verdict error, exit code 2)"
    assert f"error: {words}" in explained.stdout and "verdict: error" in explained.stdout


def _ipv6_loopback_port() -> int:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
            return int(sock.getsockname()[1])
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")


def test_unbracketed_ipv6_endpoint_runs_as_with_torchrun_and_warns() -> None:
    port = _ipv6_loopback_port()
    args = ["--nnodes=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=::1:{port}", WORKLOAD]
    out = run(["--nproc-per-node=1", *args])
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"write [::1]:{port}" in out.stderr
    assert "RESULT rank=0" in out.stdout


def test_explain_text_prints_a_byte_that_is_not_utf8_escaped(tmp_path: Path) -> None:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    full.update(TORCHRUN_JSC_EXPLAIN="text", PYTHONIOENCODING="utf-8:strict")
    with open(os.path.join(os.fsencode(tmp_path), b"tr\xffin.py"), "w") as script:
        script.write("pass\n")  # the launch is refused when the script is missing
    out = subprocess.run(
        [*(os.fsencode(a) for a in _LAUNCH), b"--standalone", b"tr\xffin.py"],
        env=full,
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert b"'tr\\xffin.py'" in out.stdout and b"UnicodeEncodeError" not in out.stderr


def test_ctrl_c_while_torch_imports_is_one_line_and_130() -> None:
    """A SIGINT in the middle of torch's import used to be lost there at some moments (the
    launcher went on for the whole resolve timeout) and at others to end in a traceback or in
    death by the signal: sent at 50 ms steps through the first 0.8 s of the import, every one
    must give the one line and 130."""
    import signal
    import time

    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    full["TORCHRUN_JSC_RESOLVE_TIMEOUT"] = "20"
    # c10d: the endpoint is resolved (retried for 20 s) before the script is looked at
    argv = [*_LAUNCH, "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=n.invalid:1"]
    for step in range(17):
        proc = subprocess.Popen(
            [*argv, "t.py"],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=stop_signals_default,
        )
        maps = Path(f"/proc/{proc.pid}/maps")
        deadline = time.monotonic() + 60
        while "libtorch" not in maps.read_text():  # torch's import has begun
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        time.sleep(step * 0.05)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"SIGINT {step * 50} ms into torch's import was lost") from None
        assert proc.returncode == 130, (step, err)
        assert err.strip().splitlines() == [
            "torchrun_jsc: interrupted before the launch; nothing was started"
        ], (step, err)


def test_ctrl_c_while_resolving_is_one_line_and_130() -> None:
    import signal

    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    full["TORCHRUN_JSC_RESOLVE_TIMEOUT"] = "60"
    full["LOGLEVEL"] = "INFO"  # says when it starts retrying: then it is resolving
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchrun_jsc",
            "--nnodes=2",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=node0i.invalid:29500",
            "t.py",
        ],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=stop_signals_default,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # torch imported, resolving (retried every 0.5 s for 60 s)
    assert first == "torchrun_jsc: node0i.invalid does not resolve yet; retrying\n", first
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "torchrun_jsc: interrupted before the launch; nothing was started"
    ]


def test_sigint_ignored_on_entry_stays_ignored() -> None:
    """Started with SIGINT ignored (``nohup``, a background job), the launcher keeps ignoring it:
    a SIGINT while it resolves changes nothing, it ends with the resolve timeout's error."""
    import signal

    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHRUN_JSC_", "PET_"))}
    full["TORCHRUN_JSC_RESOLVE_TIMEOUT"] = "3"
    full["LOGLEVEL"] = "INFO"
    proc = subprocess.Popen(
        [*_LAUNCH, "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=n.invalid:1", "t.py"],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stderr is not None
    assert proc.stderr.readline() == "torchrun_jsc: n.invalid does not resolve yet; retrying\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "does not resolve on" in err.strip().splitlines()[-1], err
