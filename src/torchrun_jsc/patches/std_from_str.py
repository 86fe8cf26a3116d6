"""torch < 2.0 on Python >= 3.11: ``Std.from_str("0")`` returns None and torchrun crashes with
``'NoneType' object has no attribute 'get'`` under the default ``--redirects 0 --tee 0``.

Replaced by a reader of the same format (``"N"`` or ``"rank:N,rank:N"`` with N in 0..3) built on
``Std(int)``, which works on every Python. Declines when the original already works.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Union

from ..errors import PatchDeclinedError
from ._common import PROCESSES, Check, replace, verified

CHECKS = (Check(PROCESSES, "Std.from_str", (("cls", "vm"),)),)
_VALUE = re.compile(r"^[0-3]$")
_MAPPING = re.compile(r"^(\d+:[0-3],)*\d+:[0-3]$")


def install() -> None:
    """Replace ``Std.from_str`` if (and only if) it is broken here."""
    [(owner, attr, _)] = verified(CHECKS)
    std: Any = owner
    if std.from_str("0") is not None and std.from_str("3") is not None:
        raise PatchDeclinedError("Std.from_str already works on this Python")

    def from_str(cls: Any, vm: str) -> Union[Any, Dict[int, Any]]:
        if _VALUE.match(vm):
            return cls(int(vm))
        if _MAPPING.match(vm):
            result: Dict[int, Any] = {}
            for item in vm.split(","):
                rank, value = item.split(":")
                result[int(rank)] = cls(int(value))
            return result
        raise ValueError(f"{vm} does not match <{_VALUE.pattern}> or <{_MAPPING.pattern}>")

    replace(owner, attr, classmethod(from_str))
