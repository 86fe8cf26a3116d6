"""The requeue (``TORCHRUN_JSC_REQUEUE=1``): its decisions, pure (``decision``), and the sequence
that carries one out (``sequence``). It imports the rooms below it (store, records, events,
processes, signals, the watch's vocabulary) and ``timing``; only the session, the patches and
``lifecycle`` (the plan's :class:`~.decision.Budget`) import it."""
