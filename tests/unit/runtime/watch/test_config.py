"""The job watch's settings: the values derived from them have one home (the config)."""

from __future__ import annotations

from typing import Optional

import pytest

from torchrun_jsc.runtime.timing import HANDOVER_START
from torchrun_jsc.runtime.watch.vocabulary import Config
from torchrun_jsc.torch_defaults import TERM_GRACE


@pytest.mark.parametrize(("grace", "seconds"), [(None, float(TERM_GRACE)), (5.0, 5.0), (0.0, 0.0)])
def test_the_term_grace_is_the_setting_else_torchs(grace: Optional[float], seconds: float) -> None:
    assert Config(hostname="node0", grace=grace).term_grace == seconds


@pytest.mark.parametrize(
    ("peer_timeout", "grace", "wait"),
    [(60.0, None, 60.0 + TERM_GRACE + HANDOVER_START), (10.0, 5.0, 10.0 + 5.0 + HANDOVER_START)],
)
def test_the_failover_wait_is_detection_grace_and_a_new_start(
    peer_timeout: float, grace: Optional[float], wait: float
) -> None:
    assert Config(peer_timeout=peer_timeout, grace=grace).failover_wait == wait
