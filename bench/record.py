"""Write a benchmark's figures into a Markdown file between named markers."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Sequence


def read_rows(paths: Sequence[Path]) -> List[Dict[str, Any]]:
    """The JSON rows (lines starting with ``{``) that a benchmark printed into these files, in
    order: the figures of earlier runs, to table or record again."""
    return [
        json.loads(line)
        for path in paths
        for line in path.read_text().splitlines()
        if line.startswith("{")
    ]


def record(name: str, body: str, path: Path) -> None:
    """Replace the section ``name`` of ``path`` (created if missing) with ``body``."""
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=path.parent,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "?"
    stamp = (
        f"_Measured {datetime.date.today().isoformat()} on commit {commit or '?'}, "
        f"{platform.machine()}, Python {platform.python_version()}._"
    )
    section = f"{begin}\n{stamp}\n\n{body}\n{end}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + f"\n\n## {name}\n\n{section}\n"
    path.write_text(text)
