"""Claims of README.md and docs/*.md checked against the code and the recorded figures: signals
without a handler, the preflight's probe count, the cluster-launch goal, the README's opening."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List

from torchrun_jsc.preflight import probe_offsets
from torchrun_jsc.settings.table import variable

REPO = Path(__file__).resolve().parents[2]
#: What users read: the README, the settings' prose (in the README's table) and the docs.
USER_DOCS = ("README.md", "docs/recipes.md", "docs/troubleshooting.md", "docs/how-it-works.md")


def blocks(name: str) -> Iterator[str]:
    """Paragraphs, list items and table rows of a markdown file, each joined into one line."""
    text = (REPO / name).read_text(encoding="utf-8")
    for paragraph in re.split(r"\n\s*\n", text):
        for item in re.split(r"\n(?=\s*[*-] |\|)", paragraph):
            yield " ".join(item.split())


# --------------------------------------------------------------------------- signals


def test_forward_signals_says_a_worker_without_a_handler_dies() -> None:
    meaning = variable("TORCHRUN_JSC_FORWARD_SIGNALS").meaning
    assert "only where the script handles the signal" in meaning
    assert "without a handler dies of it" in meaning and "the job fails" in meaning


def test_training_goes_on_is_never_said_without_the_handler() -> None:
    """SIGUSR1/SIGUSR2 passed on kill a worker that has no handler (Python's default), so
    wherever a text says training goes on after one, it says that it takes a handler."""
    found: List[str] = []
    for name in USER_DOCS:
        for block in blocks(name):
            if "USR1" in block and re.search(r"training go(es|ing) on", block):
                found.append(f"{name}: {block[:120]}")
                if re.search(r"handler|handles", block) and re.search(r"dies?\b", block):
                    found.pop()
    assert found == []


def test_recipes_say_next_to_signal_that_the_script_needs_a_handler() -> None:
    near = [b for b in blocks("docs/recipes.md") if "--signal=USR1" in b]
    assert near, "docs/recipes.md has no recipe with #SBATCH --signal=USR1"
    assert any("without a handler" in b and "die" in b for b in near), near


# --------------------------------------------------------------------------- preflight probes


def _probe_bounds() -> List[int]:
    counts = [len(probe_offsets(n)) for n in range(2, 20_000)]
    return [min(counts), max(counts)]


# A stated bound, not followed by a unit that makes it another count (seconds, names, ...).
_BOUND = re.compile(
    r"(?:(?:at most|more than|bound is|(?<!\d)1\.\.)\s*(?P<n>\d+)\b|(?P<m>\d+) is the documented)"
    r"(?!\s*(?:s|ms|MB|MiB|nodes?|names?|reasons?)\b)"
)


def test_docs_give_the_probe_count_of_the_assignment() -> None:
    least, most = _probe_bounds()
    assert (least, most) == (1, 6)
    meaning = variable("TORCHRUN_JSC_PREFLIGHT").meaning
    assert f"{least}..{most} per node" in meaning
    stated = []
    for name in ("README.md", "docs/how-it-works.md", "docs/benchmarks.md", "CHANGELOG.md"):
        for block in blocks(name):
            if "prob" in block:
                for match in _BOUND.finditer(block):
                    stated.append((name, int(match.group("n") or match.group("m")), match[0]))
    assert stated, "no text states the probe count"
    assert [s for s in stated if s[1] != most] == []


# --------------------------------------------------------------------------- benchmarks


def test_the_cluster_launch_summary_follows_the_recorded_ratios() -> None:
    text = (REPO / "docs/benchmarks.md").read_text(encoding="utf-8")
    goal = float(re.search(r"`bench/cluster_launch\.py` \|[^|]*\| ratio ≤ ([\d.]+)", text)[1])
    ratios = []
    for section in re.findall(r"<!-- bench:cluster-launch[\w-]*:begin -->(.*?)<!--", text, re.S):
        rows = [r for r in section.splitlines() if r.startswith("|")]
        header = rows[0].split("|")
        if " median paired ratio " in header:
            column = header.index(" median paired ratio ")
            ratios += [float(r.split("|")[column]) for r in rows[2:]]
        else:  # bench/cluster_phases.py: the ratio in the line under each table
            found = re.findall(r"median paired ratio ([\d.]+)", section)
            assert found, section[:200]
            ratios += [float(r) for r in found]
    assert len(ratios) >= 5
    summary = next(b for b in blocks("docs/benchmarks.md") if b.startswith("* **cluster-launch**"))
    above = [r for r in ratios if r > goal]
    assert above, "every recorded ratio meets the goal: the summary may say met"
    assert not summary.startswith("* **cluster-launch**: met"), summary[:120]
    for ratio in above:
        assert f"{ratio:.3f}" in summary, ratio


# --------------------------------------------------------------------------- README's opening


def test_the_readme_opens_with_commands_for_a_clone_then_the_install() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    opening = text.split("```", 1)[0]
    assert "clone of the repository" in opening
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "Install"
    assert "torch" in text.split("## Install", 1)[1].split("```", 1)[0]
