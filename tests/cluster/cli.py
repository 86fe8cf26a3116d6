"""``python -m tests.cluster.harness up|down|status|run``: clusters by hand (needs root)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from tests.cluster import harness
from tests.cluster.harness import Cluster, discover
from tests.cluster.slurm import TASK_PLUGINS
from tests.cluster.system import missing_requirements
from tests.cluster.topology import IB_BASE


def _pick(args: argparse.Namespace) -> list[Cluster]:
    if args.workdir:
        return [Cluster.attach(Path(args.workdir))]
    found = Cluster.find(args.prefix)
    return [Cluster.attach(w) for w in found]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tests.cluster.harness",
        description=harness.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="bring a cluster up and leave it running")
    p_up.add_argument("-n", "--nodes", type=int, default=4)
    p_up.add_argument("--auth", choices=("none", "munge"), default="none")
    p_up.add_argument("--python", default=sys.executable, help="interpreter for the nodes")
    p_up.add_argument(
        "--ib-base", type=int, default=IB_BASE, help="host number of node0 (node i: base+i)"
    )
    p_up.add_argument("--task-plugin", choices=TASK_PLUGINS, default="none")
    for p in (
        p_up,
        *(
            sub.add_parser(n, help=h)
            for n, h in (
                ("down", "tear down (by state file, or by name if none is found)"),
                ("status", "show clusters and their nodes"),
                ("run", "run a command on the login node (default) or on --node I"),
            )
        ),
    ):
        p.add_argument("--prefix", default=None if p is not p_up else "trj")
        p.add_argument("--workdir", help="cluster workdir (default: search /tmp)")
    sub.choices["run"].add_argument("--node", type=int, help="run on this node, without Slurm")
    sub.choices["run"].add_argument("command", nargs=argparse.REMAINDER)
    return ap


def _up(args: argparse.Namespace) -> int:
    why = missing_requirements()
    if why:
        print("cannot build a cluster: " + "; ".join(why), file=sys.stderr)
        return 2
    wd = Path(args.workdir) if args.workdir else None
    c = Cluster(
        args.nodes,
        args.prefix,
        wd,
        Path(args.python),
        args.auth,
        ib_base=args.ib_base,
        task_plugin=args.task_plugin,
    )
    c.up(guard=False)
    print(
        f"cluster {c.prefix} up in {c.state['up_seconds']} s: {c.nodes} nodes, workdir {c.workdir}"
    )
    print(f"  python -m tests.cluster.harness run --prefix {c.prefix} -- srun -N{c.nodes} hostname")
    print(f"  python -m tests.cluster.harness down --prefix {c.prefix}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); its exit code."""
    args = _parser().parse_args(argv)
    if args.cmd == "up":
        return _up(args)
    clusters = _pick(args)
    if args.cmd == "down":
        if not clusters and args.prefix:
            clusters = [discover(args.prefix)]
        for c in clusters:
            c.down()
            print(f"cluster {c.prefix} down ({c.workdir})")
        return 0
    if not clusters:
        print("no cluster found", file=sys.stderr)
        return 1
    if args.cmd == "status":
        for c in clusters:
            st = c.state
            print(
                f"{c.prefix}: {c.nodes} nodes, workdir {c.workdir}, owner pid "
                f"{st.get('owner_pid')}, processes {len(c.pids())}"
            )
            print(c.login(["sinfo", "-N"], timeout=20).output.rstrip())
        return 0
    if len(clusters) > 1:
        print("several clusters match; give --prefix or --workdir", file=sys.stderr)
        return 1
    c = clusters[0]
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.node is None:
        r = c.login(cmd, timeout=3600)
    else:
        [r] = c.run_on_nodes([cmd], timeout=3600, nodes=[args.node])
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode
