"""The project's exceptions.

Every error a user can cause is a :class:`ConfigError`: its message is one line that names the
variable or argument, the value, and what is accepted. The command line turns it into exit code 2.
It is also a ``ValueError``, the type torch's launcher raises for input it refuses, so that a
library caller's ``except ValueError`` around a launch catches it too.
"""

from __future__ import annotations


class TorchrunJscError(Exception):
    """Base class of every torchrun_jsc error."""


class ConfigError(TorchrunJscError, ValueError):
    """Bad input from the user (argument, environment variable); exit code 2, nothing launched.
    A ``ValueError`` as well, like torch's own refusals."""


class UnsupportedTorchError(TorchrunJscError):
    """The installed torch is outside the supported range."""


class PatchDeclinedError(TorchrunJscError):
    """A runtime patch found a torch internal it does not expect and did nothing."""
