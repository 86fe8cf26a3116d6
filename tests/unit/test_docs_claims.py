"""Claims of README.md and docs/*.md checked against the code and the recorded figures: signals
without a handler."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List

from torchrun_jsc.settings import variable

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
