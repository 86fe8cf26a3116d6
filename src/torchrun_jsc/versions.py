"""Torch versions and the one table that maps version ranges to strategies.

Every version-specific decision of torchrun_jsc is read from :data:`STRATEGIES`. The facts behind
each row (who publishes ``MASTER_ADDR`` and from what) are in ``docs/how-it-works.md``.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional, Tuple, Type, Union

from .errors import UnsupportedTorchError
from .patches.params import (
    FqHostname,
    KeepRendezvous,
    NodeDesc,
    SpareWait,
    StdFromStr,
    StoreInfoBuild,
)

#: The patches that advertise this node's address (parameter: the address).
AddressPatch = Union[FqHostname, StoreInfoBuild, NodeDesc]
#: The patches that work around a torch bug (no parameters).
BugPatch = Union[StdFromStr, KeepRendezvous, SpareWait]

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


class TorchVersion:
    """A torch release number; local parts (``+cpu``) and pre-release tags are kept in ``raw``.

    Immutable; equality, hashing and order use ``(major, minor, patch)`` only, never ``raw``.
    """

    __slots__ = ("major", "minor", "patch", "raw")

    major: int
    minor: int
    patch: int
    raw: str

    def __init__(self, major: int, minor: int, patch: int = 0, raw: str = "") -> None:
        set_field = object.__setattr__
        set_field(self, "major", major)
        set_field(self, "minor", minor)
        set_field(self, "patch", patch)
        set_field(self, "raw", raw)

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

    @property
    def _order(self) -> Tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return self.raw or f"{self.major}.{self.minor}.{self.patch}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(major={self.major!r}, minor={self.minor!r},"
            f" patch={self.patch!r}, raw={self.raw!r})"
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.major, self.minor, self.patch, self.raw))

    def __hash__(self) -> int:
        return hash(self._order)

    def _order_of(self, other: object) -> Optional[Tuple[int, int, int]]:
        """``other``'s ``(major, minor, patch)``; None when it is not of this class."""
        if isinstance(other, TorchVersion) and other.__class__ is self.__class__:
            return other._order
        return None

    def __eq__(self, other: object) -> bool:
        theirs = self._order_of(other)
        return NotImplemented if theirs is None else self._order == theirs

    def __lt__(self, other: TorchVersion) -> bool:
        theirs = self._order_of(other)
        return NotImplemented if theirs is None else self._order < theirs

    def __le__(self, other: TorchVersion) -> bool:
        theirs = self._order_of(other)
        return NotImplemented if theirs is None else self._order <= theirs

    def __gt__(self, other: TorchVersion) -> bool:
        theirs = self._order_of(other)
        return NotImplemented if theirs is None else self._order > theirs

    def __ge__(self, other: TorchVersion) -> bool:
        theirs = self._order_of(other)
        return NotImplemented if theirs is None else self._order >= theirs


#: Every torch release the cluster scenarios run on (``scripts/torch-matrix``; the README and
#: ``docs/compatibility.md`` list the same).
TESTED_RELEASES = (
    "1.13.1",
    "2.0.1",
    "2.1.2",
    "2.2.2",
    "2.3.1",
    "2.4.1",
    "2.5.1",
    "2.6.0",
    "2.7.1",
    "2.8.0",
    "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.1",
    "2.13.0",
    "2.14.1",
    "2.15.0",
)
MINIMUM = (1, 9)
#: torch starts workers in their own session from 2.2; earlier ones share the agent's group.
OWN_SESSION_FROM = (2, 2)
#: The newest tested minor release; anything newer gets the last row and a warning.
NEWEST_TESTED = max(tuple(int(x) for x in v.split(".")[:2]) for v in TESTED_RELEASES)


class Strategy(NamedTuple):
    """How one range of torch versions advertises this node's address.

    ``local_addr_arg``: torchrun accepts ``--local_addr`` and the group-rank-0 node's value becomes
    ``MASTER_ADDR`` (the "argument" or "new" solution). ``advertise_patch``: the runtime patch
    that makes a node advertise the address torchrun_jsc chose (the "old" solution; the only one
    where ``local_addr_arg`` is false).
    """

    first: Tuple[int, int]
    until: Optional[Tuple[int, int]]
    local_addr_arg: bool
    advertise_patch: Type[AddressPatch]
    master_addr: str
    #: The agent of group rank 0 also serves the workers' store (their connections count
    #: against its open-file limit).
    agent_serves_worker_store: bool = False

    @property
    def label(self) -> str:
        """The range as text, e.g. ``">=2.0,<2.4"``."""
        return _range_label(self.first, self.until)

    def contains(self, version: TorchVersion) -> bool:
        """Whether ``version`` lies in this range."""
        return _in_range(version, self.first, self.until)


def _range_label(first: Tuple[int, int], until: Optional[Tuple[int, int]]) -> str:
    lo = f">={first[0]}.{first[1]}"
    return lo if until is None else f"{lo},<{until[0]}.{until[1]}"


def _in_range(
    version: TorchVersion, first: Tuple[int, int], until: Optional[Tuple[int, int]]
) -> bool:
    return first <= version.key and (until is None or version.key < until)


STRATEGIES: Tuple[Strategy, ...] = (
    Strategy(
        (1, 9),
        (2, 0),
        local_addr_arg=False,
        advertise_patch=FqHostname,
        master_addr="group rank 0 publishes agent.api._get_fq_hostname(); no --local_addr",
    ),
    Strategy(
        (2, 0),
        (2, 4),
        local_addr_arg=True,
        advertise_patch=FqHostname,
        master_addr="group rank 0 publishes its --local_addr, else _get_fq_hostname()",
    ),
    Strategy(
        (2, 4),
        (2, 5),
        local_addr_arg=False,
        advertise_patch=StoreInfoBuild,
        master_addr="group rank 0 publishes socket.getfqdn() in RendezvousStoreInfo.build;"
        " --local_addr is ignored for it",
    ),
    Strategy(
        (2, 5),
        (2, 6),
        local_addr_arg=True,
        advertise_patch=NodeDesc,
        master_addr="the rendezvous endpoint (shared store); with"
        " TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, group rank 0's node address (--local_addr)",
    ),
    Strategy(
        (2, 6),
        None,
        local_addr_arg=True,
        advertise_patch=NodeDesc,
        master_addr="group rank 0 publishes its node address (--local_addr, else"
        " socket.getfqdn()) and serves the workers' store there",
        agent_serves_worker_store=True,
    ),
)


class TorchBug(NamedTuple):
    """A torch bug that breaks plain torchrun, and how torchrun_jsc works around it.

    Exactly one of ``patch`` (a runtime patch) and ``env`` (a variable torchrun_jsc sets unless the
    user set it) is given. ``TORCHRUN_JSC_FIX_TORCH_BUGS=0`` leaves every bug alone with a warning.
    """

    first: Tuple[int, int]
    until: Tuple[int, int]
    #: What breaks, for messages: "<fixes>" when fixed, "<left>; TORCHRUN_JSC_FIX_TORCH_BUGS=0
    #: leaves it so" when not.
    fixes: str
    left: str
    patch: Optional[Type[BugPatch]] = None
    env: Optional[Tuple[str, str]] = None
    #: The bug exists only from this Python on.
    min_python: Tuple[int, int] = (3, 0)
    #: Only multi-node c10d launches meet the bug (the others are left alone).
    multi_node_only: bool = False
    #: Only launches that may restart their workers (``--max_restarts`` > 0) meet it.
    restarts_only: bool = False
    #: What a user of plain torchrun sets to avoid it (scripts and control tests use it).
    plain_workaround: Tuple[Tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """The affected range as text."""
        return _range_label(self.first, self.until)

    def affects(self, version: TorchVersion, python: Tuple[int, int]) -> bool:
        """Whether ``version`` on ``python`` has the bug."""
        return _in_range(version, self.first, self.until) and python >= self.min_python


TORCH_BUGS: Tuple[TorchBug, ...] = (
    TorchBug(
        (1, 9),
        (2, 0),
        patch=StdFromStr,
        min_python=(3, 11),
        fixes="torch < 2.0 on Python >= 3.11 cannot read --redirects/--tee",
        left="torch < 2.0 on Python >= 3.11 crashes with the default --redirects/--tee",
        plain_workaround=(("PET_REDIRECTS", "1"), ("PET_TEE", "1")),
    ),
    TorchBug(
        (1, 9),
        (2, 3),
        patch=SpareWait,
        multi_node_only=True,
        restarts_only=True,
        fixes="torch < 2.3 lets an agent beyond --nnodes' maximum (a spare) time out at"
        " join_timeout and close the rendezvous for every node; its join now waits while the"
        " round is full",
        left="torch < 2.3 lets a spare time out at join_timeout and close the rendezvous for"
        " every node",
    ),
    TorchBug(
        (2, 3),
        (2, 4),
        patch=KeepRendezvous,
        fixes="torch 2.3 closes the rendezvous when it restarts workers (--max_restarts,"
        " membership changes)",
        left="torch 2.3 closes the rendezvous when it restarts workers, so --max_restarts ends"
        " in RendezvousClosedError",
    ),
    TorchBug(
        (2, 5),
        (2, 6),
        env=("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
        multi_node_only=True,
        fixes="torch 2.5's shared rendezvous store breaks worker restarts; a fresh store on"
        " group rank 0 (as in 2.6+) does not",
        left="torch 2.5 cannot restart workers with its shared rendezvous store",
        plain_workaround=(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),),
    ),
    TorchBug(
        (2, 6),
        (99, 0),
        env=("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
        multi_node_only=True,
        restarts_only=True,
        fixes="torch 2.6+ keeps one workers' store for the whole job, so a round re-formed"
        " after a lost node reads the previous round's gloo addresses and cannot connect (and"
        " a new group rank 0 up to 2.12 fails an assertion); a fresh store on group rank 0"
        " each round does not",
        left="torch 2.6+ cannot re-form a round after a lost node with its shared workers' store",
        plain_workaround=(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),),
    ),
)


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


def bugs_for(version: TorchVersion, python: Tuple[int, int]) -> Tuple[TorchBug, ...]:
    """The torch bugs of ``version`` on ``python``."""
    return tuple(bug for bug in TORCH_BUGS if bug.affects(version, python))


def is_untested(version: TorchVersion) -> bool:
    """True for torch releases newer than every release torchrun_jsc was proven with."""
    return version.key > NEWEST_TESTED


def newest_tested_label() -> str:
    """``"2.15"``: the newest tested minor release, for messages."""
    return f"{NEWEST_TESTED[0]}.{NEWEST_TESTED[1]}"
