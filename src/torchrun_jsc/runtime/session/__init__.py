"""The job watch wired into torch: the session that feeds torch's hooks and the watch's threads
to :func:`~torchrun_jsc.runtime.watch.machine.decide` and hands each action to its owner
(``adapter``), the process's end (``ending``), the heartbeat and watchdog threads (``threads``)
and this node's account of the job's failures with the last line (``ledger``). It imports every
other room of the runtime; only the runtime object (``agent``) and the patches import it."""
