"""Torch versions and the one table that maps version ranges to strategies.

Every version-specific decision of torchrun_jsc is read from :data:`STRATEGIES`. The facts behind
each row (who publishes ``MASTER_ADDR`` and from what) are in ``docs/how-it-works.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

from .errors import UnsupportedTorchError

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class TorchVersion:
    """A torch release number; local parts (``+cpu``) and pre-release tags are kept in ``raw``."""

    major: int
    minor: int
    patch: int = 0
    raw: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> TorchVersion:
        """Parse ``"2.13.0+cpu"``, ``"1.13.0a0"``, ``"2.15.0.dev20260101"`` and the like."""
        match = _VERSION_RE.match(text)
        if not match:
            raise UnsupportedTorchError(
                f"cannot read the torch version {text!r}; expected MAJOR.MINOR[.PATCH]"
            )
        major, minor, patch = match.groups()
        return cls(int(major), int(minor), int(patch or 0), raw=text.strip())

    @property
    def key(self) -> Tuple[int, int]:
        """``(major, minor)``."""
        return (self.major, self.minor)

    def __str__(self) -> str:
        return self.raw or f"{self.major}.{self.minor}.{self.patch}"


#: Names of the runtime patches (modules in :mod:`torchrun_jsc.patches`).
PATCH_FQ_HOSTNAME = "fq_hostname"
PATCH_STORE_INFO_BUILD = "store_info_build"
PATCH_NODE_DESC = "node_desc"
PATCH_HOST_MATCHER = "host_matcher"
PATCH_STD_FROM_STR = "std_from_str"
PATCH_KEEP_RENDEZVOUS = "keep_rendezvous"


@dataclass(frozen=True)
class Strategy:
    """How one range of torch versions is fixed.

    ``local_addr_arg``: torchrun accepts ``--local_addr`` and the group-rank-0 node's value becomes
    ``MASTER_ADDR`` (the "argument" or "new" solution). ``advertise_patch``: the runtime patch
    that makes a node advertise the address torchrun_jsc chose (the "old" solution; the only one
    where ``local_addr_arg`` is false).
    """

    first: Tuple[int, int]
    until: Optional[Tuple[int, int]]
    local_addr_arg: bool
    advertise_patch: str
    master_addr: str
    #: torch 2.5: the workers use the rendezvous store itself (breaks worker restarts).
    shares_rendezvous_store: bool = False
    #: torch 2.3: restarting the workers closes the rendezvous (``--max_restarts`` never works).
    restart_closes_rendezvous: bool = False

    @property
    def label(self) -> str:
        """The range as text, e.g. ``">=2.0,<2.4"``."""
        lo = f">={self.first[0]}.{self.first[1]}"
        return lo if self.until is None else f"{lo},<{self.until[0]}.{self.until[1]}"

    def contains(self, version: TorchVersion) -> bool:
        """Whether ``version`` lies in this range."""
        return self.first <= version.key and (self.until is None or version.key < self.until)


MINIMUM = (1, 9)
#: From this version on, torch is newer than any tested release: warn, use the last row.
UNTESTED_FROM = (3, 0)

STRATEGIES: Tuple[Strategy, ...] = (
    Strategy(
        (1, 9), (2, 0), local_addr_arg=False, advertise_patch=PATCH_FQ_HOSTNAME,
        master_addr="group rank 0 publishes agent.api._get_fq_hostname(); no --local_addr",
    ),
    Strategy(
        (2, 0), (2, 3), local_addr_arg=True, advertise_patch=PATCH_FQ_HOSTNAME,
        master_addr="group rank 0 publishes its --local_addr, else _get_fq_hostname()",
    ),
    Strategy(
        (2, 3), (2, 4), local_addr_arg=True, advertise_patch=PATCH_FQ_HOSTNAME,
        master_addr="group rank 0 publishes its --local_addr, else _get_fq_hostname()",
        restart_closes_rendezvous=True,
    ),
    Strategy(
        (2, 4), (2, 5), local_addr_arg=False, advertise_patch=PATCH_STORE_INFO_BUILD,
        master_addr="group rank 0 publishes socket.getfqdn() in RendezvousStoreInfo.build;"
        " --local_addr is ignored for it",
    ),
    Strategy(
        (2, 5), (2, 6), local_addr_arg=True, advertise_patch=PATCH_NODE_DESC,
        master_addr="the rendezvous endpoint (shared store); with"
        " TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, group rank 0's node address (--local_addr)",
        shares_rendezvous_store=True,
    ),
    Strategy(
        (2, 6), None, local_addr_arg=True, advertise_patch=PATCH_NODE_DESC,
        master_addr="group rank 0 publishes its node address (--local_addr, else"
        " socket.getfqdn()) and serves the workers' store there",
    ),
)  # fmt: skip


def strategy_for(version: TorchVersion) -> Strategy:
    """The strategy row for ``version``; raises :class:`UnsupportedTorchError` below 1.9."""
    if version.key < MINIMUM:
        raise UnsupportedTorchError(
            f"torch {version} is not supported: torchrun_jsc needs torch >= "
            f"{MINIMUM[0]}.{MINIMUM[1]}"
        )
    for strategy in STRATEGIES:
        if strategy.contains(version):
            return strategy
    return STRATEGIES[-1]  # pragma: no cover - the last row is open-ended


def is_untested(version: TorchVersion) -> bool:
    """True for torch releases newer than every release torchrun_jsc was proven with."""
    return version.key >= UNTESTED_FROM
