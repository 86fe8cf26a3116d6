"""``torch-matrix build``: create or repair one venv per torch release, with uv.

Each venv is made from ``--python`` and installed as its row of :data:`.recipes.RECIPES`
says; a base is built before the venvs that link into it. A venv that passed the smoke check
once carries a marker (:data:`.venvs.MARKER`); building it again only tops up the test
packages (psutil, numpy, this project editable) and repeats the smoke check, reinstalling only
when that fails. Every step prints wall time, network and disk deltas, and ``build.tsv`` under
the home keeps one line per venv. Only one build runs at a time (a lock file under the home);
the machine is small and shared.

Pitfalls handled here:

* torch 2.6/2.7 look for cusparseLt in site-packages/cusparselt/lib (old layout); an extra
  symlink site-packages/cusparselt provides it.
* Never let a resolver install nvidia packages into a torch-only venv: they would be written
  *through the symlinks into the base*. Every install into such a venv passes ``--excludes``
  (the nvidia/cuda/triton names from ``uv pip compile torch==VERSION``, kept in excludes/) and
  the project goes in with ``--no-deps``.
* uv reads no pip configuration, so the local wheel folders (``--find-links``) are passed to
  it; uv itself is installed with ``PIP_CONSTRAINT=/dev/null``, since a machine's pip
  configuration may cap torch and that must not stop installing uv.
* uv's cache lies under the home, on the venvs' file system, so that uv hardlinks instead of
  copying.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Callable, Dict, List, Optional, Set, TextIO, Tuple, Type

from torchrun_jsc.backend_name import FIRST
from torchrun_jsc.versions import TorchVersion

from . import REPO
from .config import Config
from .proc import log, run_logged, tail
from .recipes import CUDNN8_PIN, DEFAULT_VERSIONS, Recipe, recipe_for
from .venvs import MARKER, python_version, real_interpreter, site_packages, smoke

#: The launchers from PyPI that the backend's scenarios run: (requirement, module to import).
LAUNCHERS = (("accelerate>=1.0", "accelerate"), ("lightning>=2.2", "lightning.fabric"))


#: The platform ``uv pip compile`` resolves for when it lists a torch's nvidia packages: PyPI
#: has CUDA builds of torch for Linux x86_64 only.
COMPILE_PLATFORM = "x86_64-manylinux_2_28"
#: Names never wanted in a torch-only venv.
GPU_NAME_RE = re.compile(r"^(nvidia-|cuda-|triton$|pytorch-triton)")


def disk_used_mb(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize // 2**20


def disk_free_gb(path: Path) -> float:
    st = os.statvfs(path if path.exists() else path.parent)
    return st.f_bavail * st.f_frsize / 1e9


def net_rx_mb() -> float:
    """Bytes received on all non-loopback interfaces (machine-wide, so approximate)."""
    total = 0
    try:
        with open("/proc/net/dev") as fh:
            for line in fh.readlines()[2:]:
                name, data = line.split(":", 1)
                if name.strip() != "lo":
                    total += int(data.split()[0])
    except OSError:
        return 0.0
    return total / 1e6


def du_mb(path: Path) -> int:
    out = subprocess.run(
        ["du", "-sm", str(path)], capture_output=True, text=True, check=False
    ).stdout
    return int(out.split()[0]) if out else 0


class Lock:
    """Exclusive lock so that two builds never install at the same time."""

    def __init__(self, home: Path) -> None:
        self.path = home / ".lock"
        self.fh: Optional[TextIO] = None

    def __enter__(self) -> Lock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "w")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("torch-matrix: another build holds the lock, waiting ...")
            fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None


def cpu_wheel(cfg: Config, version: str) -> Optional[Path]:
    """The local ``torch-VERSION+cpu-*.whl`` (``--cpu-wheels``), if there is one."""
    for folder in cfg.cpu_wheel_folders():
        found = sorted(folder.glob(f"torch-{version}+cpu-*.whl"))
        if found:
            return found[0]
    return None


#: One build result: version, what happened, wall s, df delta MB, venv du MB, smoke message.
Result = Tuple[str, str, float, int, int, str]


class Builder:
    """Builds venvs one by one (bases first) and remembers the results."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.python = real_interpreter(cfg.python)
        found = python_version(self.python)
        self.python_version = f"{found[0]}.{found[1]}" if found else "3"
        self.results: List[Result] = []
        self.done: Set[str] = set()

    # --- small steps -------------------------------------------------------------------------

    def uv_env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            UV_CACHE_DIR=str(self.cfg.uv_cache),
            UV_PYTHON_DOWNLOADS="never",
            UV_LINK_MODE="hardlink",
        )
        for key in ("UV_EXCLUDE", "UV_CONSTRAINT", "UV_OVERRIDE", "VIRTUAL_ENV"):
            env.pop(key, None)
        return env

    def find_links(self, extra: Optional[Path] = None) -> List[str]:
        folders = list(self.cfg.wheel_folders())
        if extra is not None and extra not in folders:
            folders.append(extra)
        return [a for d in folders for a in ("--find-links", str(d))]

    def ensure_uv(self) -> None:
        if self.cfg.uv.exists():
            return
        log(f"installing uv into {self.cfg.tools}")
        subprocess.run([self.python, "-m", "venv", str(self.cfg.tools)], check=True)
        env = dict(os.environ, PIP_CONSTRAINT="/dev/null")  # lift a torch cap of pip's config
        pip = str(self.cfg.tools / "bin" / "pip")
        subprocess.run([pip, "install", "-q", "uv"], check=True, env=env)

    def uv_pip(
        self, sub: str, args: List[str], logfile: Path, wheels: Optional[Path] = None
    ) -> int:
        """``uv pip SUB --find-links ... ARGS``, output into ``logfile``."""
        cmd = [str(self.cfg.uv), "pip", sub, *self.find_links(wheels), *args]
        return run_logged(cmd, logfile, env=self.uv_env())

    def exclude_file(self, version: str, spec: str, logfile: Path) -> Path:
        """Names of all nvidia/cuda/triton packages ``spec`` would pull in (cached)."""
        self.cfg.excludes.mkdir(parents=True, exist_ok=True)
        path = self.cfg.excludes / f"{version}.txt"
        if path.exists() and path.read_text().strip():
            return path
        cmd = [
            str(self.cfg.uv),
            "pip",
            "compile",
            "-q",
            "-",
            *self.find_links(),
            "--python-version",
            self.python_version,
            "--python-platform",
            COMPILE_PLATFORM,
            "--no-header",
            "--no-annotate",
        ]
        proc = subprocess.run(
            cmd, input=spec + "\n", capture_output=True, text=True, env=self.uv_env(), check=False
        )
        with open(logfile, "a") as fh:
            fh.write(f"\n$ uv pip compile {spec}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            raise RuntimeError(f"uv pip compile {spec} failed (see {logfile})")
        names = {"triton"}
        for line in proc.stdout.splitlines():
            match = re.match(r"^([A-Za-z0-9_.-]+)", line.strip())
            if match and GPU_NAME_RE.match(match.group(1).lower()):
                names.add(match.group(1).lower())
        path.write_text("\n".join(sorted(names)) + "\n")
        return path

    def link_nvidia(self, version: str, base: str, cudnn8: bool) -> None:
        """site-packages/nvidia/<component> -> the base venv's component."""
        sp = site_packages(self.cfg, version)
        base_nv = site_packages(self.cfg, base) / "nvidia"
        dst = sp / "nvidia"
        if dst.is_symlink() or dst.is_file():
            dst.unlink()
        elif dst.exists():
            # only symlinks should be in here (never follow them while deleting)
            shutil.rmtree(dst)
        dst.mkdir()
        for comp in sorted(base_nv.iterdir()):
            if comp.name == "__pycache__":
                continue
            (dst / comp.name).symlink_to(comp)
        if cudnn8:
            (dst / "cudnn").unlink(missing_ok=True)
            (dst / "cudnn").symlink_to(self.cfg.cudnn8 / "nvidia" / "cudnn")
        # torch 2.6/2.7 search $ORIGIN/../../cusparselt/lib (nvidia-cusparselt-cu12 0.6 layout)
        legacy = sp / "cusparselt"
        if (base_nv / "cusparselt").exists() and not legacy.exists():
            legacy.symlink_to(base_nv / "cusparselt")

    def ensure_cudnn8(self) -> None:
        if (self.cfg.cudnn8 / "nvidia" / "cudnn" / "lib").is_dir():
            return
        logfile = self.cfg.logs / "cudnn8.log"
        args = ["--target", str(self.cfg.cudnn8), "--no-deps", "--python", self.python]
        rc = self.step(
            f"{CUDNN8_PIN} (--target, for torch 2.1-2.3)",
            lambda: self.uv_pip("install", [*args, CUDNN8_PIN], logfile),
            logfile,
        )
        if rc != 0:
            raise RuntimeError("cuDNN 8 install failed")

    def step(self, label: str, fn: Callable[[], int], logfile: Path) -> int:
        """Run ``fn()`` and print wall time, network and disk deltas."""
        home = self.cfg.home
        if disk_free_gb(home) < self.cfg.min_free_gb:
            raise RuntimeError(
                f"less than {self.cfg.min_free_gb} GB free on {home}; not installing"
            )
        t0, d0, n0 = time.monotonic(), disk_used_mb(home), net_rx_mb()
        rc = fn()
        dt, dd, dn = time.monotonic() - t0, disk_used_mb(home) - d0, net_rx_mb() - n0
        log(f"  {label}: rc={rc} wall={dt:.1f}s disk={dd:+d}MB net~{dn:.0f}MB")
        if rc != 0:
            log(tail(logfile))
        return rc

    # --- one version -------------------------------------------------------------------------

    def build(self, version: str) -> None:
        if version in self.done:
            return
        self.done.add(version)
        rec = recipe_for(version)
        if rec.base and rec.base != version:
            self.build(rec.base)  # the base must exist before we can link to it
        vdir, py = self.cfg.venv(version), self.cfg.venv_python(version)
        logfile = self.cfg.logs / f"{version}.log"
        t0, d0 = time.monotonic(), disk_used_mb(self.cfg.home)
        log(f"== torch {version}: {rec.describe()}")
        try:
            if (vdir / MARKER).exists():
                # already built: top up the extras, keep it if it still imports
                self.ensure_extras(version, rec, logfile)
                ok, msg = smoke(py)
                if ok:
                    self.record(version, "present", t0, d0, ok, msg)
                    return
                log(f"  smoke check failed ({msg}); reinstalling")
                (vdir / MARKER).unlink()
            self.install(version, rec, logfile)
            self.ensure_extras(version, rec, logfile)
            ok, msg = smoke(py)
            if ok:
                marker = {
                    "version": version,
                    "torch": msg,
                    "recipe": rec.kind,
                    "base": rec.base,
                    "cudnn8": rec.cudnn8,
                    "python": self.python,
                    "built": datetime.datetime.now().isoformat(timespec="seconds"),
                }
                (vdir / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
            self.record(version, "built", t0, d0, ok, msg)
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            self.record(version, "FAILED", t0, d0, False, str(exc).splitlines()[0])

    def install(self, version: str, rec: Recipe, logfile: Path) -> None:
        """Create the venv and install torch as ``rec`` says."""
        vdir, py = self.cfg.venv(version), self.cfg.venv_python(version)
        if rec.base and not (self.cfg.venv(rec.base) / MARKER).exists():
            raise RuntimeError(f"base {rec.base} is not usable")
        wheels: Optional[Path] = None
        if rec.kind == "cpu":
            wheel = cpu_wheel(self.cfg, version)
            if wheel is None:
                folders = " ".join(map(str, self.cfg.cpu_wheel_folders())) or "none"
                raise RuntimeError(
                    f"no torch-{version}+cpu-*.whl in the CPU wheel folders ({folders}; "
                    "--cpu-wheels / TORCH_MATRIX_CPU_WHEELS)"
                )
            wheels = wheel.parent
        if not py.exists():
            cmd = [str(self.cfg.uv), "venv", "-q", "--python", self.python, str(vdir)]
            if run_logged(cmd, logfile, env=self.uv_env()) != 0:
                raise RuntimeError(f"uv venv failed:\n{tail(logfile)}")
        if rec.cudnn8:
            self.ensure_cudnn8()
        spec = rec.spec(version)
        args = ["--python", str(py)]
        if rec.kind == "base":
            excl = self.cfg.excludes / "triton-only.txt"
            self.cfg.excludes.mkdir(parents=True, exist_ok=True)
            excl.write_text("triton\n")
            args += ["--excludes", str(excl), spec, *rec.extra]
        elif rec.kind == "cpu":
            args += [spec]
        else:
            args += ["--excludes", str(self.exclude_file(version, spec, logfile)), spec]
        rc = self.step(
            f"uv pip install {spec}",
            lambda: self.uv_pip("install", args, logfile, wheels=wheels),
            logfile,
        )
        if rc != 0:
            raise RuntimeError("torch install failed")
        if rec.kind == "torch":
            assert rec.base is not None  # a torch-only row always names its base
            self.link_nvidia(version, rec.base, rec.cudnn8)

    def ensure_extras(self, version: str, rec: Recipe, logfile: Path) -> None:
        """psutil + numpy (as the recipe says), the launchers built on torchrun that the
        backend's scenarios run (accelerate, Lightning; torch >= 2.6, which loads the backend)
        and this project, editable, no deps."""
        py = self.cfg.venv_python(version)
        launchers = list(LAUNCHERS) if TorchVersion.parse(version).key >= FIRST else []
        modules = ", ".join(["psutil", "numpy", *(m for _, m in launchers)])
        # the editable install's metadata must have the backend's entry point (older installs
        # of the project lack it)
        probe = (
            f"import importlib.metadata as m, {modules}\n"
            "d = m.distribution('torchrun_jsc')\n"
            "assert any(e.group == 'torchrun.handlers' for e in d.entry_points)"
        )
        if subprocess.run([str(py), "-c", probe], capture_output=True, check=False).returncode == 0:
            return
        excl = self.cfg.excludes / f"{version}.txt"
        extra = ["--excludes", str(excl)] if excl.exists() else []
        wanted = ["psutil", rec.numpy, *(req for req, _ in launchers)]
        rc = self.uv_pip("install", ["--python", str(py), *extra, *wanted], logfile)
        if rc != 0:
            raise RuntimeError(f"{' '.join(wanted)} install failed:\n{tail(logfile)}")
        # --no-deps: resolving the project's `torch` dependency could pull nvidia
        # packages and write them through the symlinks into the shared base.
        rc = self.uv_pip(
            "install",
            [
                "--python",
                str(py),
                "--no-deps",
                "--reinstall-package",
                "torchrun_jsc",
                "-e",
                str(REPO),
            ],
            logfile,
        )
        if rc != 0:
            log(
                f"  WARNING: editable install of {REPO} failed (venv still usable for torch):\n"
                + tail(logfile, 4)
            )

    def record(self, version: str, what: str, t0: float, d0: int, ok: bool, msg: str) -> None:
        dt, dd = time.monotonic() - t0, disk_used_mb(self.cfg.home) - d0
        vdir = self.cfg.venv(version)
        size = du_mb(vdir) if vdir.exists() else 0
        res = "ok" if ok else "FAIL"
        log(
            f"-- torch {version}: {what}, wall {dt:.1f}s, disk {dd:+d} MB (df), "
            f"venv {size} MB (du), smoke {res}: {msg}"
        )
        self.results.append((version, what, dt, dd, size, f"{res}: {msg}"))
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        fields = [stamp, version, what, f"{dt:.1f}", str(dd), str(size), f"{res}: {msg}"]
        with open(self.cfg.build_log, "a") as fh:
            fh.write("\t".join(fields) + "\n")


def run_build(cfg: Config, versions: List[str]) -> int:
    """The ``build`` subcommand; 0 when every venv passed its smoke check."""
    versions = versions or list(DEFAULT_VERSIONS)
    for v in versions:
        recipe_for(v)  # fail early on unknown versions
    for d in (cfg.home, cfg.venvs, cfg.logs, cfg.cudnn8.parent, cfg.excludes):
        d.mkdir(parents=True, exist_ok=True)
    builder = Builder(cfg)
    free = disk_free_gb(cfg.home)
    log(f"torch-matrix: {cfg.home}, {free:.0f} GB free, python {builder.python}")
    log("wheel folders: " + (" ".join(map(str, cfg.wheel_folders())) or "none"))
    with Lock(cfg.home):
        builder.ensure_uv()
        d0 = disk_used_mb(cfg.home)
        for v in versions:
            builder.build(v)
    log("\nsummary (version, result, wall s, df delta MB, venv du MB, smoke):")
    for version, what, dt, dd, size, msg in builder.results:
        log(f"  {version:8} {what:8} {dt:7.1f} {dd:+8d} {size:8d}  {msg}")
    log(
        f"total df delta this run: {disk_used_mb(cfg.home) - d0:+d} MB; "
        f"matrix on disk: {du_mb(cfg.home)} MB (du, hardlinks counted once)"
    )
    return 0 if all(r[5].startswith("ok") for r in builder.results) else 1
