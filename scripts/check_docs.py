#!/usr/bin/env python3
"""check_docs.py: the project's markdown files render as written and their links lead somewhere.

Checks README.md, CHANGELOG.md and docs/*.md (or the files named on the command line):

* every code fence is closed, and a closing fence is alone on its line (only the backticks or
  tildes; a text after them keeps the block open, so the prose after it renders as code);
* every relative link (``[text](path)``, ``[text](path#anchor)``, ``[ref]: path``) names a file
  or folder of the repository, and an anchor names a heading of the target markdown file (the
  anchor GitHub makes of it) or an explicit ``id``/``name``;
* a link into this repository on GitHub (:data:`REPOSITORY` ``/blob/main/<path>#anchor`` or
  ``/tree/main/<path>``) is checked against this checkout the same way (file, anchor);
* no link points outside the repository (an absolute path, ``file:``, ``..`` past the root),
  and no text names a path on the development machine (:data:`MACHINE_PREFIXES`);
* README.md is also the package index page, where relative links lead nowhere: every link in it
  is absolute, and it quotes no commit (which commit ran what is docs/compatibility.md's).

Other links with a scheme (``https:``, ``mailto:``) are not followed: the check needs no network.
Exit code 0 when everything is fine, 1 with one ``FILE:LINE: problem`` line per problem.
Python standard library only.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
#: The files checked by default, relative to the repository root.
DEFAULT_GLOBS = ("README.md", "CHANGELOG.md", "docs/*.md")
#: Path prefixes of the development machine; documentation must not send readers there.
MACHINE_PREFIXES = ("/work/",)
#: The project's source repository (``[project.urls]`` in pyproject.toml).
REPOSITORY = "https://github.com/HelmholtzAI-FZJ/torchrun_jsc"
#: Links into this checkout as GitHub shows it: ``<prefix><path>#anchor``.
REPOSITORY_PREFIXES = (f"{REPOSITORY}/blob/main/", f"{REPOSITORY}/tree/main/")
#: The README the package index shows (``readme`` in pyproject.toml), relative to the root.
PACKAGE_README = "README.md"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<run>`{3,}|~{3,})(?P<rest>.*)$")
_HEADING = re.compile(r"^\s{0,3}(?P<marks>#{1,6})(?:\s+(?P<text>.*?))?\s*$")
_CODE_SPAN = re.compile(r"(?P<ticks>`+)(?P<code>.+?)(?P=ticks)")
_INLINE_LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\(\s*(?P<target><[^>]*>|[^\s)]+)(?:\s+[^)]*)?\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(?P<target><[^>]*>|\S+)")
_HTML_ID = re.compile(r"<[a-zA-Z][^>]*?\s(?:id|name)\s*=\s*[\"'](?P<id>[^\"']+)[\"']")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_MACHINE_PATH = re.compile("|".join(re.escape(p) for p in MACHINE_PREFIXES))
# 7 to 40 hex digits with at least one digit and one letter: an abbreviated or full commit.
_COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


@dataclass(frozen=True)
class Problem:
    """One finding: where it is and what is wrong."""

    path: Path
    line: int
    message: str

    def render(self, root: Path) -> str:
        """``docs/x.md:12: message``, the path relative to ``root`` when it lies inside."""
        try:
            shown = self.path.resolve().relative_to(root.resolve())
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Link:
    """A link target as written, and the line it is on."""

    line: int
    target: str


def slug(text: str) -> str:
    """The anchor GitHub makes of a heading's text (lower case; letters, digits, marks, ``-`` and
    ``_`` kept; a space becomes ``-``; everything else dropped)."""
    kept = []
    for char in text.lower():
        if char == " ":
            kept.append("-")
        elif char in "-_" or char.isalnum() or unicodedata.category(char).startswith("M"):
            kept.append(char)
    return "".join(kept)


def heading_text(markdown: str) -> str:
    """The text a heading renders to: code spans keep their content, links their text, emphasis
    markers and HTML tags go."""
    parts: List[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(markdown):
        parts.append(_plain(markdown[last : match.start()]))
        parts.append(match.group("code").strip() or match.group("code"))
        last = match.end()
    parts.append(_plain(markdown[last:]))
    return "".join(parts).strip()


def _plain(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("*", "")


def _scan(lines: Sequence[str]) -> Tuple[List[bool], List[Tuple[int, str]]]:
    """Which lines are code (fences and their content), and the fence problems found."""
    code: List[bool] = []
    problems: List[Tuple[int, str]] = []
    opened: Optional[Tuple[int, str]] = None  # (line, the opening run of backticks or tildes)
    for number, line in enumerate(lines, start=1):
        match = _FENCE.match(line)
        if match is None:
            code.append(opened is not None)
            continue
        run, rest = match.group("run"), match.group("rest")
        if opened is None:
            if run[0] == "`" and "`" in rest:
                problems.append(
                    (number, f"{run} followed by text with a backtick is not a code fence")
                )
                code.append(False)
                continue
            opened = (number, run)
            code.append(True)
            continue
        code.append(True)
        start, opening = opened
        if run[0] != opening[0] or len(run) < len(opening):
            continue  # a shorter run or the other character: content of the open block
        if rest.strip():
            problems.append(
                (
                    number,
                    f"text after {run} inside the code block opened on line {start}: a closing"
                    " fence must be alone on its line, so the block stays open here",
                )
            )
            continue
        opened = None
    if opened is not None:
        problems.append((opened[0], f"code block opened with {opened[1]} is never closed"))
    return code, problems


def fence_problems(lines: Sequence[str]) -> List[Tuple[int, str]]:
    """``(line number, message)`` for every fence that is left open or closed with text."""
    return _scan(lines)[1]


def outside_code(lines: Sequence[str]) -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` of every line that is not part of a code block."""
    code, _ = _scan(lines)
    for number, (line, is_code) in enumerate(zip(lines, code), start=1):
        if not is_code:
            yield number, line


def prose_lines(lines: Sequence[str]) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of every line outside code blocks, code spans removed."""
    for number, line in outside_code(lines):
        yield number, _CODE_SPAN.sub("", line)


def links(lines: Sequence[str]) -> List[Link]:
    """Every inline link, image and reference definition outside code (a link's text may run
    over several lines; its line is the one of its target)."""
    found: List[Link] = []
    prose = [""] * len(lines)
    for number, text in prose_lines(lines):
        definition = _REF_DEF.match(text)
        if definition is not None:
            found.append(Link(number, _unwrap(definition.group("target"))))
            continue
        prose[number - 1] = text
    joined = "\n".join(prose)
    for match in _INLINE_LINK.finditer(joined):
        number = joined.count("\n", 0, match.start("target")) + 1
        found.append(Link(number, _unwrap(match.group("target"))))
    return sorted(found, key=lambda link: link.line)


def _unwrap(target: str) -> str:
    return target[1:-1] if target.startswith("<") and target.endswith(">") else target


def anchors(lines: Sequence[str]) -> Set[str]:
    """The anchors a markdown file offers: its headings' slugs (GitHub numbers repeats ``-1``,
    ``-2``, ...) and explicit HTML ``id``/``name`` attributes."""
    seen: Dict[str, int] = {}
    result: Set[str] = set()
    for _, line in outside_code(lines):
        for match in _HTML_ID.finditer(_CODE_SPAN.sub("", line)):
            result.add(match.group("id"))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        text = re.sub(r"(^|\s+)#+\s*$", "", heading.group("text") or "")
        base = slug(heading_text(text))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def link_problems(path: Path, lines: Sequence[str], root: Path) -> List[Tuple[int, str]]:
    """``(line number, message)`` for every link that leads nowhere or out of ``root``; links
    into :data:`REPOSITORY` are resolved against ``root``."""
    problems: List[Tuple[int, str]] = []
    root = root.resolve()
    for link in links(lines):
        target = link.target
        if target.lower().startswith("file:"):
            problems.append((link.line, f"link {target!r} points at a file outside the repository"))
            continue
        base = path.parent
        prefix = next((p for p in REPOSITORY_PREFIXES if target.startswith(p)), None)
        if prefix is not None:
            base, relative = root, target[len(prefix) :]
        elif _SCHEME.match(target):
            continue  # https:, mailto:, ...: not followed (no network)
        else:
            relative = target
        where, _, anchor = relative.partition("#")
        where = unquote(where)
        if where.startswith("/"):
            problems.append(
                (link.line, f"link {target!r} is an absolute path, outside the repository")
            )
            continue
        resolved = (base / where).resolve() if where else path.resolve()
        try:
            resolved.relative_to(root)
        except ValueError:
            problems.append((link.line, f"link {target!r} leads outside the repository"))
            continue
        if not resolved.exists():
            problems.append((link.line, f"link {target!r}: {where} does not exist"))
            continue
        if anchor and resolved.suffix == ".md" and resolved.is_file():
            offered = anchors(_read(resolved))
            if unquote(anchor) not in offered:
                problems.append(
                    (link.line, f"link {target!r}: no heading in {resolved.name} has #{anchor}")
                )
    return problems


def package_page_problems(lines: Sequence[str]) -> List[Tuple[int, str]]:
    """``(line number, message)`` for what breaks or does not belong on the package index page
    (:data:`PACKAGE_README`): a relative link, a quoted commit."""
    problems: List[Tuple[int, str]] = []
    for link in links(lines):
        if _SCHEME.match(link.target):
            continue
        where = link.target if not link.target.startswith("#") else PACKAGE_README + link.target
        problems.append(
            (
                link.line,
                f"link {link.target!r} is relative, and leads nowhere on the package index"
                f" page; write it absolute: {REPOSITORY_PREFIXES[0]}{where}",
            )
        )
    for number, text in prose_lines(lines):
        for match in _COMMIT.finditer(text):
            problems.append(
                (
                    number,
                    f"{PACKAGE_README} quotes commit {match.group(0)}: which commit ran what"
                    " belongs in docs/compatibility.md",
                )
            )
    return problems


def machine_path_problems(lines: Sequence[str]) -> List[Tuple[int, str]]:
    """``(line number, message)`` for every mention of a development machine's path."""
    problems: List[Tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        match = _MACHINE_PATH.search(line)
        if match is not None:
            problems.append(
                (
                    number,
                    f"{match.group(0)}... is a path on a development machine, not in the"
                    " repository; name the file in the repository or leave it out",
                )
            )
    return problems


def _read(path: Path) -> List[str]:
    return path.read_text(encoding="utf-8").splitlines()


def check_file(path: Path, root: Path) -> List[Problem]:
    """Every problem of one markdown file; links resolve against ``root``."""
    lines = _read(path)
    found = fence_problems(lines) + link_problems(path, lines, root) + machine_path_problems(lines)
    if path.resolve() == (root / PACKAGE_README).resolve():
        found += package_page_problems(lines)
    return [Problem(path, line, message) for line, message in sorted(found, key=lambda f: f[0])]


def default_files(root: Path) -> List[Path]:
    """README.md, CHANGELOG.md and docs/*.md of ``root`` (those that exist)."""
    files: List[Path] = []
    for pattern in DEFAULT_GLOBS:
        files += sorted(root.glob(pattern))
    return files


def main(argv: Optional[Sequence[str]] = None, root: Path = ROOT) -> int:
    """Check the files named in ``argv`` (default: :func:`default_files`); 1 on any problem."""
    names = list(sys.argv[1:] if argv is None else argv)
    if any(name in ("-h", "--help") for name in names):
        print(__doc__)
        return 0
    files = [Path(name) for name in names] or default_files(root)
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(f"check_docs.py: no such file: {missing[0]}", file=sys.stderr)
        return 2
    problems = [p for f in files for p in check_file(f, root)]
    for problem in problems:
        print(problem.render(root))
    if problems:
        print(f"check_docs.py: {len(problems)} problem(s) in {len(files)} files", file=sys.stderr)
        return 1
    print(f"check_docs.py: {len(files)} files ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
