"""The rendezvous backend ``jsc``: torchrun_jsc's fixes for every launcher that calls torch's own
launcher (``torchrun --rdzv-backend=jsc``, ``accelerate launch --rdzv_backend jsc``, programs that
call ``torch.distributed.run``).

torch (2.6 and newer) loads it from the entry-point group ``torchrun.handlers`` when it imports its
rendezvous registry, and calls the creator when an agent starts with ``--rdzv-backend=jsc``
(:mod:`.handler`). Launches that select another backend never reach it; this module imports
nothing else, so loading it costs torch's other launches nothing.
"""

from __future__ import annotations

from typing import Any, Callable


def creator() -> Callable[[Any], Any]:
    """The entry point (group ``torchrun.handlers``): torch calls it once when it imports its
    rendezvous registry and registers what it returns under the backend's name
    (:data:`torchrun_jsc.backend_name.NAME`)."""

    def create(params: Any) -> Any:
        from .handler import create_handler

        return create_handler(params)

    return create
