"""torchrun_jsc: a drop-in ``torchrun`` that starts multi-node jobs correctly.

Command line: ``torchrun_jsc [torchrun arguments] train.py``. Library: :func:`apply_fixes`.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .release import __version__

__all__ = ["__version__", "apply_fixes"]


def apply_fixes(strict: bool = True, argv: Optional[List[str]] = None) -> bool:
    """Fix this process's coming torchrun launch; return whether this torch is supported.

    Reads the torchrun command line from ``argv`` (default ``sys.argv[1:]``, which is then
    rewritten in place so that ``torch.distributed.run.main()`` sees the fixed one), plans and
    applies the fixes. With ``strict``, an unsupported torch (< 1.9, or newer than every tested
    release) raises :class:`~torchrun_jsc.errors.UnsupportedTorchError`; without, an older torch
    is left alone and a newer one gets the newest strategy; both return False.
    Bad input and refused launches raise :class:`~torchrun_jsc.errors.ConfigError`.
    A second call in one process first undoes the first one's patches and job watch; a child
    forked after a launch starts from plain torch.
    """
    import os

    import torch

    from . import log, patches
    from .apply import carry_out, prepare
    from .errors import ConfigError, UnsupportedTorchError
    from .versions import TorchVersion, is_untested, strategy_for

    log.setup(os.environ)
    version = TorchVersion.parse(str(torch.__version__))
    try:
        strategy_for(version)
    except UnsupportedTorchError:
        if strict:
            raise
        return False
    if is_untested(version) and strict:
        raise UnsupportedTorchError(f"torch {version} is newer than every tested release")
    args = list(sys.argv[1:] if argv is None else argv)
    prepared = prepare(args, os.environ)
    problem = prepared.plan.error or prepared.plan.refusal
    if problem is not None:
        raise ConfigError(problem)
    patches.restore_all()  # a launch before this one in this process
    carry_out(prepared.plan)
    if argv is None:
        sys.argv[1:] = list(prepared.plan.argv)
    else:
        argv[:] = list(prepared.plan.argv)
    return not is_untested(version)
