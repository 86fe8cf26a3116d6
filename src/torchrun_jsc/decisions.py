"""What every planning step collects: decisions with their reasons, patches, warnings and
rendezvous keys. One collector for the launch side (:mod:`torchrun_jsc.plan`) and the agent
side (:mod:`torchrun_jsc.lifecycle`). Pure."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional

from .patches.params import Params, PatchSpec


class Decision(NamedTuple):
    """One line of the plan's reasoning: what was decided and why."""

    topic: str
    value: str
    reason: str


class Collector:
    """Decisions, patches, warnings, and rendezvous keys to set in the one ``--rdzv_conf``
    torchrun_jsc adds."""

    def __init__(self) -> None:
        self.decisions: List[Decision] = []
        self.patches: List[PatchSpec] = []
        self.warnings: List[str] = []
        self.conf: Dict[str, str] = {}

    def decide(self, topic: str, value: object, reason: str) -> None:
        """Record a decision (``value`` as text)."""
        self.decisions.append(Decision(topic, str(value), reason))

    def patch(self, what: Params, reason: str, at: Optional[int] = None) -> None:
        """Install the patch ``what`` is for (``at``: before the patch collected there, for
        one that is known last but must be installed first)."""
        spec = PatchSpec(what, reason)
        if at is None:
            self.patches.append(spec)
        else:
            self.patches.insert(at, spec)
