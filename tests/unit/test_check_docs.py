"""scripts/check_docs.py: code fences, relative links and anchors, links into the repository on
GitHub, paths outside the repository, the package index page (README.md).

Markdown is written to a temporary folder that stands for the repository; no network.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import check_docs  # noqa: E402


def lines(text: str) -> List[str]:
    return text.strip("\n").splitlines()


def problems(root: Path, name: str, text: str) -> List[str]:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.lstrip("\n"), encoding="utf-8")
    return [f"{p.line}: {p.message}" for p in check_docs.check_file(path, root)]


# --------------------------------------------------------------------------- code fences

CLEAN = """
# Title

```bash
echo one
```

~~~
```python
inside a tilde block
```
~~~

````markdown
```bash
shown, not closing
```
````
"""


def test_a_clean_file_has_no_fence_problem() -> None:
    assert check_docs.fence_problems(lines(CLEAN)) == []


def test_text_after_a_closing_fence_keeps_the_block_open() -> None:
    # The README defect: the sentence after the fence and the next block rendered as code.
    text = """
```bash
srun torchrun_jsc train.py
``` `python -m torchrun_jsc` is the same command. As a library:

```python
import torchrun_jsc
```
"""
    found = check_docs.fence_problems(lines(text))
    assert [line for line, _ in found] == [3, 5]
    assert "opened on line 1" in found[0][1]
    assert "alone on its line" in found[0][1]


def test_an_unclosed_fence_is_named_by_its_opening_line() -> None:
    found = check_docs.fence_problems(lines("text\n\n```bash\necho\n"))
    assert found == [(3, "code block opened with ``` is never closed")]


def test_a_closing_fence_may_be_longer_and_indented_but_not_shorter() -> None:
    assert check_docs.fence_problems(lines("````\nx\n```\n`````")) == []
    assert check_docs.fence_problems(lines("* item\n\n  ```sh\n  x\n  ```\n")) == []
    assert check_docs.fence_problems(lines("~~~\n```\n~~~")) == []


def test_a_backtick_run_with_backticks_after_it_is_no_fence() -> None:
    found = check_docs.fence_problems(lines("``` `code` and more\n"))
    assert len(found) == 1 and "not a code fence" in found[0][1]


def test_trailing_blanks_after_a_closing_fence_are_fine() -> None:
    assert check_docs.fence_problems(["```", "x", "```   "]) == []


# --------------------------------------------------------------------------- slugs and anchors


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Use", "use"),
        ("What it fixes", "what-it-fixes"),
        ("After (a): explicit endpoint", "after-a-explicit-endpoint"),
        ("`Address already in use`", "address-already-in-use"),
        ("JURECA-DC", "jureca-dc"),
        ("`TORCHRUN_JSC_SLURM_AUTO=1` and `i`", "torchrun_jsc_slurm_auto1-and-i"),
        ("torch 2.0\u20132.3 (restart)", "torch-2023-restart"),  # en dash
        ("`patch … skipped: …`", "patch--skipped-"),
        ("A [link](other.md) in a heading", "a-link-in-a-heading"),
        ("**Bold** words", "bold-words"),
        ("Straße", "straße"),
    ],
)
def test_slug_of_a_heading(heading: str, anchor: str) -> None:
    assert check_docs.slug(check_docs.heading_text(heading)) == anchor


def test_repeated_headings_are_numbered_and_code_is_no_heading() -> None:
    text = """
# Recipes
## After
## After
```bash
# not a heading
```
## Setup ##
<a id="explicit"></a>
"""
    assert check_docs.anchors(lines(text)) == {"recipes", "after", "after-1", "setup", "explicit"}


# --------------------------------------------------------------------------- links


def test_relative_links_to_files_folders_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text("", encoding="utf-8")
    problems(tmp_path, "docs/other.md", "# Other\n\n## A part\n")
    text = """
# Guide

See [other](other.md), [its part](other.md#a-part), [here](#guide), [code](../src/x.py),
[folder](../src/), [line](../src/x.py#L3) and ![image](<other.md>).

[ref]: other.md#a-part
"""
    assert problems(tmp_path, "docs/guide.md", text) == []


def test_a_link_text_may_run_over_lines(tmp_path: Path) -> None:
    text = """
# Guide

See [the part about
the guide](#guide) and [one that is
missing](#gone).
"""
    assert problems(tmp_path, "guide.md", text) == [
        "5: link '#gone': no heading in guide.md has #gone"
    ]


def test_broken_links_and_anchors_are_named(tmp_path: Path) -> None:
    problems(tmp_path, "docs/other.md", "# Other\n")
    text = """
# Guide

[gone](missing.md) [part](other.md#nothing) [self](#nowhere)

[ref]: also-missing.md
"""
    found = problems(tmp_path, "docs/guide.md", text)
    assert found == [
        "3: link 'missing.md': missing.md does not exist",
        "3: link 'other.md#nothing': no heading in other.md has #nothing",
        "3: link '#nowhere': no heading in guide.md has #nowhere",
        "5: link 'also-missing.md': also-missing.md does not exist",
    ]


def test_links_out_of_the_repository_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n", encoding="utf-8")
    text = """
[a](/work/shared/research/notes.md) [b](../outside.md) [c](file:///etc/hosts)
"""
    found = "\n".join(problems(root, "GUIDE.md", text))
    assert found.count("1: ") == 4
    assert "link '/work/shared/research/notes.md' is an absolute path, outside the" in found
    assert "link '../outside.md' leads outside the repository" in found
    assert "link 'file:///etc/hosts' points at a file outside the repository" in found
    assert "/work/... is a path on a development machine" in found


def test_external_links_and_links_in_code_are_not_followed(tmp_path: Path) -> None:
    text = """
[PyPI](https://pypi.org/project/torchrun_jsc/) <mailto:x@example.org> `[no](missing.md)`

```markdown
[no](missing.md)
```
"""
    assert problems(tmp_path, "README.md", text) == []


def test_machine_paths_are_found_in_code_blocks_too(tmp_path: Path) -> None:
    found = problems(tmp_path, "README.md", "```sh\ncat /work/shared/x.md\n```\n")
    assert len(found) == 1 and found[0].startswith("2: /work/...")


# ----------------------------------------------------------------------- links into the repository

BLOB = f"{check_docs.REPOSITORY}/blob/main"
TREE = f"{check_docs.REPOSITORY}/tree/main"


def test_absolute_links_into_the_repository_are_checked_against_the_checkout(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text("", encoding="utf-8")
    problems(tmp_path, "docs/other.md", "# Other\n\n## A part\n")
    text = f"""
# Guide

[a]({BLOB}/docs/other.md) [b]({BLOB}/docs/other.md#a-part) [c]({TREE}/docs)
[d]({TREE}/src/) [e]({BLOB}/src/x.py#L3) [f]({BLOB}/docs/guide.md#guide)
"""
    # Resolved from the repository's root, not from the folder of the file that links.
    assert problems(tmp_path, "docs/guide.md", text) == []


def test_broken_absolute_links_into_the_repository_are_named(tmp_path: Path) -> None:
    problems(tmp_path, "docs/other.md", "# Other\n")
    text = f"""
# Guide

[a]({BLOB}/docs/missing.md) [b]({BLOB}/docs/other.md#nothing)
[c]({TREE}/gone) [d]({BLOB}/../outside.md)
"""
    assert problems(tmp_path, "docs/guide.md", text) == [
        f"3: link '{BLOB}/docs/missing.md': docs/missing.md does not exist",
        f"3: link '{BLOB}/docs/other.md#nothing': no heading in other.md has #nothing",
        f"4: link '{TREE}/gone': gone does not exist",
        f"4: link '{BLOB}/../outside.md' leads outside the repository",
    ]


def test_other_links_to_github_are_not_followed(tmp_path: Path) -> None:
    text = f"""
[issues]({check_docs.REPOSITORY}/issues) [home]({check_docs.REPOSITORY})
[commit]({check_docs.REPOSITORY}/blob/0123abc/gone.md) [other](https://github.com/pytorch/pytorch/blob/main/gone.md)
"""
    assert problems(tmp_path, "docs/guide.md", text) == []


# ------------------------------------------------------------------------- the package index page


def test_the_package_readme_has_only_absolute_links(tmp_path: Path) -> None:
    problems(tmp_path, "docs/other.md", "# Other\n")
    text = f"""
# Title

[a](docs/other.md) [b](#title) [c]({BLOB}/docs/other.md) [d]({BLOB}/README.md#title)
"""
    assert problems(tmp_path, "README.md", text) == [
        "3: link 'docs/other.md' is relative, and leads nowhere on the package index page;"
        f" write it absolute: {BLOB}/docs/other.md",
        "3: link '#title' is relative, and leads nowhere on the package index page; write it"
        f" absolute: {BLOB}/README.md#title",
    ]


def test_relative_links_are_fine_outside_the_package_readme(tmp_path: Path) -> None:
    problems(tmp_path, "README.md", "# Title\n")
    assert problems(tmp_path, "docs/guide.md", "# G\n\n[a](../README.md#title) [b](#g)\n") == []
    assert problems(tmp_path, "CHANGELOG.md", "# C\n\n[a](README.md)\n") == []


def test_the_package_readme_quotes_no_commit(tmp_path: Path) -> None:
    text = """
# Title

Ran at 49f9f0f and at 0123456789abcdef0123456789abcdef01234567; not: 1234567, abcdefa,
released 2026-12-01, `95f36b6` in code.

```
b989d9c in a block
```
"""
    assert problems(tmp_path, "README.md", text) == [
        "3: README.md quotes commit 49f9f0f: which commit ran what belongs in"
        " docs/compatibility.md",
        "3: README.md quotes commit 0123456789abcdef0123456789abcdef01234567: which commit ran"
        " what belongs in docs/compatibility.md",
    ]
    assert problems(tmp_path, "docs/notes.md", text) == []


def test_this_repositorys_readme_is_a_working_package_page() -> None:
    found = check_docs.check_file(REPO / "README.md", REPO)
    assert [p.render(REPO) for p in found] == []


# --------------------------------------------------------------------------- command line


def test_main_reports_each_problem_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "README.md").write_text("```\nopen\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("[b](b.md)\n", encoding="utf-8")
    assert check_docs.main([], root=tmp_path) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "README.md:1: code block opened with ``` is never closed",
        "docs/a.md:1: link 'b.md': b.md does not exist",
    ]


def test_main_on_clean_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "README.md").write_text(f"# Hi\n\n[me]({BLOB}/README.md#hi)\n", encoding="utf-8")
    assert check_docs.main([], root=tmp_path) == 0
    assert capsys.readouterr().out.strip() == "check_docs.py: 1 files ok"


def test_the_default_files_are_readme_changelog_and_docs() -> None:
    names = {p.relative_to(REPO).as_posix() for p in check_docs.default_files(REPO)}
    assert "README.md" in names
    assert {n for n in names if n.startswith("docs/")} == {
        p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")
    }
