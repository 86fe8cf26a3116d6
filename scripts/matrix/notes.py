"""The notes under the compatibility table: per release in memory, grouped by text on paper.

In memory a note is one string per release, its parts joined by ``"; "``. On paper
(``docs/compatibility.md``) every part is written once, in one paragraph with every other part
that applies to exactly the same releases, headed by a label naming them::

  - 1.13.1-2.15.0 (all 17): what every release shares
  - 1.13.1-2.10.0, 2.13.0-2.15.0 (15): what all but two share
  - 2.3.1, 2.6.0: what two share
  - 2.7.1: what only 2.7.1 has

Ranges run over the table's columns (three or more neighbouring columns become ``A-B``); the
count in parentheses follows a label with a range. :func:`parse_notes` reads back what
:func:`render_notes` wrote (and the older one-line-per-release form).
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Sequence, Tuple

from .config import MatrixError
from .venvs import version_order

#: What joins the parts of one release's note.
SEPARATOR = "; "
_COUNT = re.compile(r"^(?P<items>.*?)(?: \((?:all )?(?P<count>\d+)\))?$")


def note_parts(note: str) -> List[str]:
    """The parts of a note, in order, without empty ones and repeats."""
    parts: List[str] = []
    for part in note.split(SEPARATOR):
        part = part.strip()
        if part and part not in parts:
            parts.append(part)
    return parts


def group_notes(notes: Mapping[str, str]) -> List[Tuple[Tuple[str, ...], str]]:
    """``{release: note}`` -> ``[(releases, text)]``: every part once, with the parts that apply
    to the same releases in one text. Groups come in the order their first part first occurs
    (releases in version order, parts in note order)."""
    where: Dict[str, List[str]] = {}
    for version in sorted(notes, key=version_order):
        for part in note_parts(notes[version]):
            where.setdefault(part, []).append(version)
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for part, versions in where.items():
        groups.setdefault(tuple(versions), []).append(part)
    return [(versions, SEPARATOR.join(parts)) for versions, parts in groups.items()]


def release_label(versions: Sequence[str], columns: Sequence[str]) -> str:
    """The label of a group: ``"1.13.1-2.15.0 (all 17)"``, ``"2.3.1, 2.6.0"``, ``"2.7.1"``.

    Neighbouring columns (three or more) become a range; releases that are no column are
    named one by one. The count follows when the label has a range.
    """
    chosen = set(versions)
    items: List[str] = []
    run: List[str] = []

    def flush() -> None:
        if len(run) >= 3:
            items.append(f"{run[0]}-{run[-1]}")
        else:
            items.extend(run)
        run.clear()

    for column in columns:
        if column in chosen:
            run.append(column)
        else:
            flush()
    flush()
    others = sorted(chosen - set(columns), key=version_order)
    items = sorted(items + others, key=lambda item: version_order(item.split("-")[0]))
    label = ", ".join(items)
    if len(chosen) > 1 and chosen == set(columns):
        return f"{label} (all {len(chosen)})"
    if any("-" in item for item in items):
        return f"{label} ({len(chosen)})"
    return label


def parse_label(label: str, columns: Sequence[str]) -> List[str]:
    """The releases a label of :func:`release_label` names; :class:`MatrixError` if it names a
    range whose ends are no columns (in order) or a count that does not match."""
    match = _COUNT.match(label)
    assert match is not None  # the pattern matches every string
    versions: List[str] = []
    for item in match["items"].split(", "):
        first, dash, last = item.partition("-")
        if not dash:
            versions.append(item)
            continue
        if first not in columns or last not in columns:
            raise MatrixError(
                f"torch-matrix: note label {label!r}: {item!r} is no range of columns"
            )
        lo, hi = columns.index(first), columns.index(last)
        if lo >= hi:
            raise MatrixError(f"torch-matrix: note label {label!r}: {item!r} runs backwards")
        versions.extend(columns[lo : hi + 1])
    if match["count"] is not None and int(match["count"]) != len(versions):
        raise MatrixError(
            f"torch-matrix: note label {label!r} counts {match['count']},"
            f" but names {len(versions)} releases"
        )
    return versions


def render_notes(notes: Mapping[str, str], columns: Sequence[str]) -> List[str]:
    """The Markdown list items of the notes (none for no notes)."""
    return [f"- {release_label(v, columns)}: {text}" for v, text in group_notes(notes)]


def parse_notes(lines: Sequence[str], columns: Sequence[str]) -> Dict[str, str]:
    """``{release: note}`` from list items as :func:`render_notes` wrote them."""
    parts: Dict[str, List[str]] = {}
    for line in lines:
        label, sep, text = line.removeprefix("- ").partition(": ")
        if not line.startswith("- ") or not sep:
            continue
        for version in parse_label(label, columns):
            parts.setdefault(version, []).append(text)
    return {v: SEPARATOR.join(p) for v, p in parts.items()}
