"""Signals: a stop by a signal and the agent's one line (``signalled``: the stops noted, an
object), a stop before torch's handlers exist (``early_stop``: an object), whether a
SIGUSR1/SIGUSR2 reached the workers directly (``direct``, pure) and the probe that tells it
(``probe``). No module-level state: the process's runtime holds the objects. Imports nothing of
the runtime outside this package."""
