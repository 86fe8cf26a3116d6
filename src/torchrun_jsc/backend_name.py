"""The name of torchrun_jsc's rendezvous backend, the first torch release that loads it and the
backend it is planned as: what the command line (:mod:`.request`, :mod:`.plan`) and the backend
itself (:mod:`.backend`) both need."""

from __future__ import annotations

#: The backend's name, as the launchers' ``--rdzv-backend`` takes it.
NAME = "jsc"
#: The first torch release that loads rendezvous backends from entry points.
FIRST = (2, 6)
#: The backend a launch that names :data:`NAME` is planned as (torch's own).
PLANNED_AS = "c10d"
