"""The project's exceptions.

Every error a user can cause is a :class:`ConfigError`: its message is one line that names the
variable or argument, the value, and what is accepted. The command line turns it into exit code 2.
"""

from __future__ import annotations


class TorchrunJscError(Exception):
    """Base class of every torchrun_jsc error."""


class ConfigError(TorchrunJscError):
    """Bad input from the user (argument, environment variable); exit code 2, nothing launched."""


class UnsupportedTorchError(TorchrunJscError):
    """The installed torch is outside the supported range."""


class PatchDeclinedError(TorchrunJscError):
    """A runtime patch found a torch internal it does not expect and did nothing."""
