"""This node's record: the workers' grace has one default (torch's)."""

from __future__ import annotations

from typing import Optional

import pytest

from torchrun_jsc.runtime.node import Node
from torchrun_jsc.torch_defaults import TERM_GRACE


@pytest.mark.parametrize(("grace", "seconds"), [(None, float(TERM_GRACE)), (5.0, 5.0), (0.0, 0.0)])
def test_the_term_grace_is_the_setting_else_torchs(grace: Optional[float], seconds: float) -> None:
    assert Node(hostname="node0", grace=grace).term_grace() == seconds
