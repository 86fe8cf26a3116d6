"""The project's logger: one line per message on stderr, level from ``LOGLEVEL``."""

from __future__ import annotations

import logging
from typing import Mapping

#: The logger every module of torchrun_jsc writes to.
logger = logging.getLogger("torchrun_jsc")


def setup(env: Mapping[str, str]) -> logging.Logger:
    """Print the project's messages to stderr at ``LOGLEVEL`` (torch elastic's convention,
    default WARNING); called once by the command line and :func:`torchrun_jsc.apply_fixes`."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    level = logging.getLevelName(env.get("LOGLEVEL", "WARNING").strip().upper())
    logger.setLevel(level if isinstance(level, int) else logging.WARNING)
    return logger
