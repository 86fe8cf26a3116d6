"""``torch-matrix run-scenarios``: the cluster scenarios per torch version, as a Markdown table.

Per venv: ``TRJSC_CLUSTER_PYTHON=<venv python> TRJSC_SLOW_SCENARIOS=1 <pytest python> -m pytest
-m cluster SUITE --junitxml=<home>/scenarios/<version>.xml`` from the repository (needs root;
12-15 minutes per release), then one table row per scenario and one column per
version into ``docs/compatibility.md``. ``--from-junit VERSION=FILE ...`` renders the table
from existing junit files without running anything.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from . import REPO
from .config import Config, MatrixError
from .proc import TIMEOUT_RC, clean_env, run_logged
from .venvs import full_python_version, select, version_order

#: The scenarios run per torch version: every launch scenario of torchrun_jsc, the Slurm
#: auto-configured launch and the good preflight. (The harness's own tests, explain and the
#: guards do not depend on the torch version; CI runs them on 2.13 and Debian's 1.13.)
SUITE = (
    "tests/cluster/test_launcher.py",
    "tests/cluster/test_lifecycle.py",
    "tests/cluster/test_diagnosis.py::test_slurm_auto_configuration",
    "tests/cluster/test_preflight.py::test_good_job_ok_in_seconds",
)
#: Scenarios that do not depend on the torch release (torchrun_jsc's own heartbeats, the
#: cluster's size), left to CI and to one run outside the matrix (``pytest -k``): training under
#: full load, the default peer timeout, a 32-node launch. (``scancel --signal`` runs per release:
#: whether a worker gets Slurm's signal once depends on where the release starts its workers.)
DESELECT = "not fully_loaded and not with_default_settings and not thirty_two"
#: junit outcomes from best to worst; a test reported twice keeps the worst.
OUTCOMES = ("passed", "skipped", "failed", "error")
SYMBOL = {"passed": "pass", "failed": "**FAIL**", "error": "**ERROR**", "skipped": "skip"}
#: Where ``run-scenarios`` writes by default.
COMPATIBILITY = REPO / "docs" / "compatibility.md"

Results = Dict[str, str]
#: The torch part of a test id: ``torch2.4.1``, ``torch1.13.0a0``, ``torch?`` (unknown).
_TORCH_ID = r"torch(?:\?|\d[0-9A-Za-z.]*)"


def scenario_name(classname: str, name: str) -> str:
    """``"tests.cluster.test_x"``, ``"test_y[torch2.4.1-p]"`` -> ``"test_x::test_y[p]"``.

    The suite puts the torch version into test ids (``[torch2.4.1-x]``, ``[torch2.4.1]``);
    it is dropped so that one scenario is one row across versions.
    """
    name = re.sub(rf"\[{_TORCH_ID}\]", "", name)
    name = re.sub(rf"(?<=\[){_TORCH_ID}-", "", name)
    return f"{classname.rsplit('.', 1)[-1]}::{name}" if classname else name


def junit_results(root: ET.Element) -> Results:
    """junit XML -> {scenario: passed|failed|error|skipped}."""
    results: Results = {}
    for case in root.iter("testcase"):
        short = scenario_name(case.get("classname", ""), case.get("name", "?"))
        tags = {child.tag for child in case}
        status = next((s for s in ("failure", "error", "skipped") if s in tags), "passed")
        status = "failed" if status == "failure" else status
        if short not in results or OUTCOMES.index(status) > OUTCOMES.index(results[short]):
            results[short] = status
    return results


def parse_junit(path: Path) -> Results:
    """The results of one junit XML file."""
    try:
        return junit_results(ET.parse(path).getroot())
    except (OSError, ET.ParseError) as exc:
        raise MatrixError(f"torch-matrix: cannot read junit file {path}: {exc}") from None


def previous_notes(text: str) -> Dict[str, str]:
    """The per-version notes under an earlier ``docs/compatibility.md``'s table."""
    notes: Dict[str, str] = {}
    _, found, tail = text.partition("\n## Notes\n")
    for line in tail.splitlines() if found else []:
        version, sep, note = line.removeprefix("- ").partition(": ")
        if line.startswith("- ") and sep:
            notes[version] = note
    return notes


def previous_runs(text: str) -> tuple[Dict[str, Results], str]:
    """The per-version results of an earlier ``docs/compatibility.md`` (as written by
    :func:`render_compat`) and the commit it names."""
    found = re.search(r"^- Commit: `([^`]+)`", text, re.M)
    commit = found[1] if found else "unknown"
    status = {symbol: outcome for outcome, symbol in SYMBOL.items()}
    versions: List[str] = []
    runs: Dict[str, Results] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| scenario |"):
            versions = cells[1:]
            runs = {v: {} for v in versions}
        elif line.startswith("| `") and versions and len(cells) == len(versions) + 1:
            for version, cell in zip(versions, cells[1:]):
                if cell in status:
                    runs[version][cells[0].strip("`")] = status[cell]
    return runs, commit


def render_compat(
    runs: Mapping[str, Results],
    notes: Mapping[str, str],
    python: str,
    commit: str,
    date: str,
) -> str:
    """Markdown: one row per scenario, one column per torch version."""
    versions = sorted(runs, key=version_order)
    scenarios = sorted({s for r in runs.values() for s in r})
    lines = [
        "# Compatibility matrix",
        "",
        "<!-- GENERATED FILE: written by `scripts/torch-matrix run-scenarios`. "
        "Do not edit by hand; re-run the script instead. -->",
        "",
        "Generated by `scripts/torch-matrix run-scenarios` -- do not edit by hand.",
        "",
        f"- Date: {date}",
        f"- Commit: `{commit}`",
        f"- Python: {python}",
        "- Suite: `pytest -m cluster "
        + " ".join(SUITE)
        + f" -k '{DESELECT}'`, one run per torch version "
        "(`TRJSC_CLUSTER_PYTHON` = that version's venv); each pass means every rank's gloo "
        "all_reduce was right and MASTER_ADDR was on the IB network",
        "",
    ]
    if scenarios:
        lines.append("| scenario | " + " | ".join(versions) + " |")
        lines.append("|---|" + "---|" * len(versions))
        for s in scenarios:
            cells = [SYMBOL.get(runs[v].get(s, ""), "--") for v in versions]
            lines.append(f"| `{s}` | " + " | ".join(cells) + " |")
        totals = []
        for v in versions:
            r = list(runs[v].values())
            totals.append(f"{r.count('passed')}/{len(r)}")
        lines.append("| *passed / total* | " + " | ".join(totals) + " |")
    else:
        lines.append("No scenarios were collected.")
    lines += [
        "",
        "Legend: pass, **FAIL**, **ERROR** (error in setup/teardown), skip, "
        "-- (not run for this version).",
    ]
    if any(notes.values()):
        lines += ["", "## Notes", ""]
        ordered = sorted(notes.items(), key=lambda item: version_order(item[0]))
        lines += [f"- {v}: {n}" for v, n in ordered if n]
    return "\n".join(lines) + "\n"


def run_suite(
    cfg: Config, version: str, pytest_python: Path, timeout: float, extra: Sequence[str]
) -> tuple[Results, Optional[str]]:
    """Run the suite on one venv: its results and a note when pytest did not finish normally."""
    cfg.scenarios.mkdir(parents=True, exist_ok=True)
    xml = cfg.scenarios / f"{version}.xml"
    xml.unlink(missing_ok=True)
    env = clean_env()
    env["TRJSC_CLUSTER_PYTHON"] = str(cfg.venv_python(version))
    env["TRJSC_SLOW_SCENARIOS"] = "1"  # torch < 2.1's kill scenario (300 s barrier)
    cmd = [
        str(pytest_python),
        "-m",
        "pytest",
        "-m",
        "cluster",
        *SUITE,
        "-k",
        DESELECT,
        f"--junitxml={xml}",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    logfile = cfg.logs / f"scenarios-{version}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    logfile.write_text("")
    t0 = time.monotonic()
    rc = run_logged(cmd, logfile, env=env, cwd=REPO, timeout=timeout)
    dt = time.monotonic() - t0
    note = None
    if rc not in (0, 1):  # 1 = some tests failed (shown in the table)
        note = {5: "no tests collected", TIMEOUT_RC: "timeout"}.get(rc, f"pytest exit code {rc}")
    try:
        results = parse_junit(xml) if xml.exists() else {}
    except MatrixError:  # e.g. pytest was killed while writing it; the other versions go on
        results = {}
        note = "; ".join(n for n in (note, "unreadable junit XML") if n)
    values = list(results.values())
    counts = " ".join(f"{k}={values.count(k)}" for k in SYMBOL)
    print(f"{version}\trc={rc}\t{dt:.0f}s\t{counts}", flush=True)
    return results, note


def _pairs(items: Sequence[str], what: str) -> List[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise MatrixError(f"torch-matrix: {what} wants VERSION=..., got {item!r}")
        pairs.append((key, value))
    return pairs


def run_scenarios(
    cfg: Config,
    versions: List[str],
    output: Path,
    pytest_python: Path,
    timeout: float,
    from_junit: Optional[Sequence[str]],
    note_items: Sequence[str],
    pytest_args: Sequence[str],
    keep_previous: bool = False,
) -> int:
    """The ``run-scenarios`` subcommand; writes ``output`` (with ``keep_previous``, the
    columns of the versions not run now are kept from the file's earlier content, each with a
    note naming the commit they were measured on)."""
    earlier: Dict[str, Results] = {}
    earlier_notes: Dict[str, str] = {}
    earlier_commit = ""
    if keep_previous and output.exists():
        earlier, earlier_commit = previous_runs(output.read_text())
        earlier_notes = previous_notes(output.read_text())
    runs: Dict[str, Results] = {}
    notes: Dict[str, str] = {}
    if from_junit:
        for version, path in _pairs(from_junit, "--from-junit"):
            runs[version] = parse_junit(Path(path))
    else:
        for version in select(cfg, versions):
            runs[version], note = run_suite(cfg, version, pytest_python, timeout, pytest_args)
            if note:
                notes[version] = note
    for version, results in earlier.items():
        if version not in runs and results:
            runs[version] = results
            # a column kept once already names the run it came from; its notes travel with it
            note = earlier_notes.get(version, "")
            if not note.startswith("kept from"):
                kept = (
                    f"kept from the run at commit {earlier_commit}; the scenarios added since"
                    " (-- in its column) have not run on this release"
                )
                note = "; ".join(n for n in (kept, note) if n)
            notes[version] = note
    for version, text in _pairs(note_items, "--note"):
        notes[version] = "; ".join(n for n in (notes.get(version, ""), text) if n)
    python = full_python_version(cfg.python) or "unknown"
    commit = git_commit()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_compat(runs, notes, python, commit, datetime.date.today().isoformat()))
    print(f"wrote {output}")
    return 0


def git_commit() -> str:
    """The short commit of the repository, or ``unknown``."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        out = ""
    return out or "unknown"
