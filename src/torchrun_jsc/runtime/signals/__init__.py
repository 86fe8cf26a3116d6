"""Signals: a stop by a signal and the agent's one line (``signalled``), a stop before torch's
handlers exist (``early_stop``), whether a SIGUSR1/SIGUSR2 reached the workers directly
(``direct``, pure) and the probe that tells it (``probe``). Imports nothing of the runtime
outside this package."""
