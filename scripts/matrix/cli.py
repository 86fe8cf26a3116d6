"""torch-matrix: build and use one venv per torch release for torchrun_jsc's tests.

Subcommands (see ``torch-matrix COMMAND --help``)::

  build [VERSION...]          create/repair the venvs (default: every release of
                              torchrun_jsc.versions.TESTED_RELEASES)
  list                        print "VERSION<TAB>PYTHON" for every built venv
  check [VERSION...]          2-process torchrun + gloo all_reduce per venv
  fingerprints [VERSION...]   record facts about the patched torch internals into
                              tests/unit/data/fingerprints.json
  run-scenarios [VERSION...]  run the torchrun_jsc cluster scenarios per venv and write
                              docs/compatibility.md

Without VERSION, check, fingerprints and run-scenarios take every built venv. Settings come
from an option, else an environment variable, else a default (:mod:`.config` lists them all):
``--home``/``TORCH_MATRIX_HOME`` (``~/.cache/torchrun_jsc-matrix``),
``--python``/``TORCH_MATRIX_PYTHON`` (``python3``),
``--find-links``/``TORCH_MATRIX_FIND_LINKS`` (the local folders of pip's configuration),
``--cpu-wheels``/``TORCH_MATRIX_CPU_WHEELS`` (the ``--find-links`` folders),
``--debian-python``/``TORCH_MATRIX_DEBIAN_PYTHON`` (``/usr/bin/python3``),
``--min-free-gb``/``TORCH_MATRIX_MIN_FREE_GB`` (``10``). Options of one subcommand go after
its name (``torch-matrix build --home /tmp/m 2.4.1``).

Exit codes: 0 all passed, 1 some venv failed, 2 a usage error (unknown version, venv not
built, bad option).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import List, Optional

from . import REPO
from .build import run_build
from .check import run_check
from .config import SETTINGS, Config, MatrixError
from .fingerprints import FINGERPRINTS, run_fingerprints
from .recipes import DEFAULT_VERSIONS
from .scenarios import COMPATIBILITY, SUITE, rerender, run_scenarios
from .venvs import built_versions

#: The settings each subcommand takes (``--home`` is everywhere).
USES = {
    "build": ("home", "python", "find_links", "cpu_wheels", "min_free_gb"),
    "list": ("home",),
    "check": ("home", "debian_python"),
    "fingerprints": ("home", "debian_python"),
    "run-scenarios": ("home", "python"),
}


def _settings_epilog() -> str:
    lines = ["settings (option, environment variable, default):"]
    for s in SETTINGS.values():
        lines.append(f"  {s.option:16} {s.env:28} {s.default}")
    lines.append(
        "an option wins over its variable (now: home " + str(Config.resolve({}).home) + ");"
    )
    lines.append("scripts/matrix/recipes.py and build.py tell how the nvidia libraries")
    lines.append("are shared and the pitfalls")
    return "\n".join(lines)


def _add_settings(parser: argparse.ArgumentParser, command: str) -> None:
    group = parser.add_argument_group("settings")
    for key in USES[command]:
        s = SETTINGS[key]
        group.add_argument(
            s.option,
            dest=key,
            metavar=s.metavar,
            default=None,
            help=f"{s.help} (env {s.env}; default: {s.default})",
        )


def make_parser() -> argparse.ArgumentParser:
    """The command line of ``scripts/torch-matrix``."""
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="torch-matrix",
        description=doc.split("\n\n")[0].rstrip("."),
        epilog=_settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "build",
        help="create or repair venvs (idempotent)",
        description="Build one venv per torch version (default: "
        + " ".join(DEFAULT_VERSIONS)
        + ", from torchrun_jsc.versions.TESTED_RELEASES), installed as the version's row of "
        "scripts/matrix/recipes.py says. Venvs that pass the smoke check are kept; each gets "
        "psutil, numpy (<2 below torch 2.3) and this project (editable, --no-deps). Prints "
        "wall time, disk delta and smoke result.",
    )
    p.add_argument("versions", nargs="*", metavar="VERSION")
    _add_settings(p, "build")

    p = sub.add_parser(
        "list",
        help="print VERSION<TAB>PYTHON for every built venv",
        description="Print VERSION<TAB>PYTHON for every built venv, in version order.",
    )
    _add_settings(p, "list")

    p = sub.add_parser(
        "check",
        help="torchrun --standalone --nproc_per_node=2 gloo all_reduce",
        description="Per venv: python -m torch.distributed.run --standalone "
        "--nproc_per_node=2 scripts/matrix/gloo_check.py. A torch bug of the version table "
        "(torchrun_jsc.versions.TORCH_BUGS) that breaks single-node plain torchrun gets its "
        "plain_workaround variables (torch 1.13 on Python 3.11: PET_REDIRECTS=1 PET_TEE=1).",
    )
    p.add_argument("versions", nargs="*", metavar="VERSION")
    p.add_argument(
        "--debian", action="store_true", help="also check Debian's python3-torch (debian-1.13)"
    )
    _add_settings(p, "check")

    p = sub.add_parser(
        "fingerprints",
        help="record facts about the patched torch internals",
        description="Per venv (and Debian's python3-torch as 'debian-1.13' if installed), "
        "record existence, kind and parameters of the private functions torchrun_jsc patches "
        "(the CHECKS of its patch modules), plus torchrun's option strings and PET_* env "
        "actions. Merges into the JSON file, keyed by X.Y.Z.",
    )
    p.add_argument("versions", nargs="*", metavar="VERSION")
    p.add_argument(
        "--output",
        default=str(FINGERPRINTS),
        help="the JSON file to merge into (default: tests/unit/data/fingerprints.json)",
    )
    p.add_argument("--no-debian", action="store_true", help="skip Debian's python3-torch")
    _add_settings(p, "fingerprints")

    p = sub.add_parser(
        "run-scenarios",
        help="cluster suite per venv -> docs/compatibility.md",
        description="Per venv: TRJSC_CLUSTER_PYTHON=<venv python> <pytest-python> -m pytest "
        "-m cluster " + " ".join(SUITE) + " --junitxml=<home>/scenarios/VERSION.xml (needs "
        "root); then writes a torch version x scenario table.",
    )
    p.add_argument("versions", nargs="*", metavar="VERSION")
    p.add_argument(
        "--output",
        default=str(COMPATIBILITY),
        help="the Markdown file to write (default: docs/compatibility.md)",
    )
    p.add_argument(
        "--pytest-python",
        default=str(REPO / ".venv" / "bin" / "python"),
        help="the interpreter that runs pytest (default: .venv/bin/python of this repository)",
    )
    p.add_argument(
        "--timeout", type=float, default=3600, help="per version, seconds (default: 3600)"
    )
    p.add_argument(
        "--from-junit",
        nargs="+",
        metavar="VERSION=FILE",
        help="do not run anything; render the table from these junit files",
    )
    p.add_argument(
        "--ran-at",
        metavar="COMMIT,DATE",
        help="with --from-junit: the commit and date (YYYY-MM-DD) of the run that wrote the"
        " files, for the table's notes and header (default: this checkout's commit, today)",
    )
    p.add_argument(
        "--keep-previous",
        action="store_true",
        help="keep what is not run now from the output: the columns of the other versions, and"
        " in a column of which only some scenarios run (--pytest-args -k ...) the others"
        " (noted as such)",
    )
    p.add_argument(
        "--rerender",
        action="store_true",
        help="do not run anything; write the output again from its own table, notes, date and"
        " commit (after a change of the format; takes --note)",
    )
    p.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="VERSION=TEXT",
        help="add a note for VERSION under the table (repeatable)",
    )
    _add_settings(p, "run-scenarios")
    p.add_argument(
        "--pytest-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="extra arguments for pytest (must come last)",
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run one subcommand; returns the exit code."""
    args = make_parser().parse_args(argv)
    command: str = args.command
    try:
        cfg = Config.resolve({key: getattr(args, key) for key in USES[command]})
        if command == "build":
            return run_build(cfg, args.versions)
        if command == "list":
            for v in built_versions(cfg):
                print(f"{v}\t{cfg.venv_python(v)}")
            return 0
        if command == "check":
            return run_check(cfg, args.versions, args.debian)
        if command == "fingerprints":
            return run_fingerprints(cfg, args.versions, Path(args.output), not args.no_debian)
        if args.rerender:
            if args.versions or args.from_junit or args.keep_previous or args.pytest_args:
                raise MatrixError(
                    "torch-matrix: --rerender runs nothing: it takes no VERSION, --from-junit,"
                    " --keep-previous or --pytest-args"
                )
            return rerender(Path(args.output), args.note)
        ran_at = None
        if args.ran_at is not None:
            commit, _, date = args.ran_at.partition(",")
            if (
                not args.from_junit
                or not re.fullmatch(r"[0-9a-f]{7,40}", commit)
                or not (re.fullmatch(r"\d{4}-\d{2}-\d{2}", date))
            ):
                raise MatrixError(
                    f"torch-matrix: --ran-at {args.ran_at!r}: give COMMIT,YYYY-MM-DD (a short"
                    " or full commit hash), with --from-junit"
                )
            ran_at = (commit, date)
        return run_scenarios(
            cfg,
            args.versions,
            output=Path(args.output),
            pytest_python=Path(args.pytest_python),
            timeout=args.timeout,
            from_junit=args.from_junit,
            note_items=args.note,
            pytest_args=args.pytest_args,
            keep_previous=args.keep_previous,
            ran_at=ran_at,
        )
    except MatrixError as exc:
        print(exc, file=sys.stderr)
        return 2
