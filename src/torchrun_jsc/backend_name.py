"""The name of torchrun_jsc's rendezvous backend and the first torch release that loads it: what
the command line (:mod:`.request`) and the backend itself (:mod:`.backend`) both need."""

from __future__ import annotations

#: The backend's name, as the launchers' ``--rdzv-backend`` takes it.
NAME = "jsc"
#: The first torch release that loads rendezvous backends from entry points.
FIRST = (2, 6)
