"""``torch-matrix run-scenarios``: the cluster scenarios per torch version, as a Markdown table.

Per venv: ``TRJSC_CLUSTER_PYTHON=<venv python> TRJSC_SLOW_SCENARIOS=1 <pytest python> -m pytest
-m cluster SUITE --junitxml=<home>/scenarios/<version>.xml`` from the repository (needs root;
12-15 minutes per release), then one table row per scenario and one column per
version into ``docs/compatibility.md``, the notes grouped by text (:mod:`.notes`).
``--from-junit VERSION=FILE ...`` renders the table from existing junit files without running
anything; ``--rerender`` writes the file again from its own content; ``--keep-previous`` keeps
what is not run now (:func:`merge_previous`).
"""

from __future__ import annotations

import datetime
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import REPO
from .config import Config, MatrixError
from .notes import SEPARATOR, note_parts, parse_notes, render_notes
from .proc import TIMEOUT_RC, clean_env, run_logged
from .venvs import full_python_version, select, version_order

#: The scenarios run per torch version: every launch scenario of torchrun_jsc, every scenario
#: after the start (the job watch, signals, Slurm's stop, recovery, requeue, partitions), the
#: rendezvous backend through torchrun, accelerate and Lightning Fabric (skipped before torch
#: 2.6), the Slurm auto-configured launch and the good preflight. (The harness's own tests,
#: explain and the guards do not depend on the torch version; CI runs them on 2.13 and Debian's
#: 1.13.)
SUITE = (
    "tests/cluster/test_launcher.py",
    "tests/cluster/test_lifecycle.py",
    "tests/cluster/test_stops.py",
    "tests/cluster/test_recovery.py",
    "tests/cluster/test_requeue.py",
    "tests/cluster/test_partition.py",
    "tests/cluster/test_backend.py",
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
#: The row an earlier table gave junit entries without a name (they name no scenario; read
#: back, it is dropped).
NAMELESS = "`?`"
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
        name = case.get("name")
        if not name:  # names no scenario
            continue
        short = scenario_name(case.get("classname", ""), name)
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


def _columns(text: str) -> List[str]:
    """The torch versions of an earlier table's header row (none without a table)."""
    for line in text.splitlines():
        if line.startswith("| scenario |"):
            return [c.strip() for c in line.strip().strip("|").split("|")][1:]
    return []


def previous_notes(text: str) -> Dict[str, str]:
    """The per-version notes under an earlier ``docs/compatibility.md``'s table (grouped as
    :func:`.notes.render_notes` writes them, or one line per version)."""
    _, found, tail = text.partition("\n## Notes\n")
    return parse_notes(tail.splitlines() if found else [], _columns(text))


def previous_field(text: str, name: str) -> str:
    """The value of a ``- Name: value`` line of an earlier table's head ("unknown" if none)."""
    found = re.search(rf"^- {name}: `?([^`\n]+)`?$", text, re.M)
    return found[1] if found else "unknown"


def previous_runs(text: str) -> tuple[Dict[str, Results], str]:
    """The per-version results of an earlier ``docs/compatibility.md`` (as written by
    :func:`render_compat`) and the commit it names."""
    commit = previous_field(text, "Commit")
    status = {symbol: outcome for outcome, symbol in SYMBOL.items()}
    versions = _columns(text)
    runs: Dict[str, Results] = {v: {} for v in versions}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and versions and len(cells) == len(versions) + 1:
            for version, cell in zip(versions, cells[1:]):
                if cell in status and cells[0] != NAMELESS:
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
        lines += render_notes(notes, versions)
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


def kept_note(earlier_commit: str) -> str:
    """The note of a column kept from an earlier table (one part: it contains no ``"; "``)."""
    return (
        f"kept from the table of commit {earlier_commit}: scenarios added since"
        " (-- in its column) have not run on this release"
    )


def rerun_note(results: Results, earlier_commit: str, commit: str, date: str) -> str:
    """The note of a column of which only ``results`` were run now (the rest kept)."""
    done = ", ".join(f"{s} ({SYMBOL[r]})" for s, r in sorted(results.items()))
    return (
        f"re-run on {date} at commit {commit} without the rest of its column (kept as the"
        f" table of commit {earlier_commit} had it): {done}"
    )


def merge_previous(
    runs: Dict[str, Results],
    notes: Dict[str, str],
    earlier: Mapping[str, Results],
    earlier_notes: Mapping[str, str],
    earlier_commit: str,
    commit: str,
    date: str,
) -> None:
    """``--keep-previous``: fill ``runs`` and ``notes`` in place from the earlier table.

    A column not run now is kept with its notes, noted as kept once. A column of which only
    some scenarios ran now keeps the earlier results of the others and its notes, plus a note
    naming what ran now, when and at which commit. A column run in full is the new one alone.
    """
    for version, results in earlier.items():
        if not results:
            continue
        note = earlier_notes.get(version, "")
        if version not in runs:
            runs[version] = dict(results)
            # a column kept once already names the run it came from; its notes travel with it
            if not any(p.startswith("kept from") for p in note_parts(note)):
                note = SEPARATOR.join(n for n in (kept_note(earlier_commit), note) if n)
            notes[version] = note
        elif runs[version] and set(results) - set(runs[version]):
            now = runs[version]
            runs[version] = {**results, **now}
            added = rerun_note(now, earlier_commit, commit, date)
            notes[version] = SEPARATOR.join(n for n in (note, added, notes.get(version, "")) if n)


def rerender(output: Path, note_items: Sequence[str]) -> int:
    """``--rerender``: write ``output`` again from its own table, notes, date and commit."""
    try:
        text = output.read_text()
    except OSError as exc:
        raise MatrixError(f"torch-matrix: --rerender: cannot read {output}: {exc}") from None
    runs, commit = previous_runs(text)
    notes = previous_notes(text)
    for version, note in _pairs(note_items, "--note"):
        notes[version] = SEPARATOR.join(n for n in (notes.get(version, ""), note) if n)
    date, python = previous_field(text, "Date"), previous_field(text, "Python")
    output.write_text(render_compat(runs, notes, python, commit, date))
    print(f"wrote {output}")
    return 0


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
    ran_at: Optional[Tuple[str, str]] = None,
) -> int:
    """The ``run-scenarios`` subcommand; writes ``output`` (with ``keep_previous``, what is
    not run now is kept from the file's earlier content, as :func:`merge_previous` says).
    ``ran_at``: the commit and date of the run that wrote the ``from_junit`` files (default:
    this checkout's commit, today)."""
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
    commit, date = ran_at or (git_commit(), datetime.date.today().isoformat())
    merge_previous(runs, notes, earlier, earlier_notes, earlier_commit, commit, date)
    for version, text in _pairs(note_items, "--note"):
        notes[version] = SEPARATOR.join(n for n in (notes.get(version, ""), text) if n)
    python = full_python_version(cfg.python) or "unknown"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_compat(runs, notes, python, commit, date))
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
