"""What runs inside the agent process after the launch, in rooms by concept (each package's
docstring says what it holds and what it may import):

- :mod:`.watch`: the job watch's decisions, pure (vocabulary, ``decide``, quorum, heartbeats);
- :mod:`.records`: what failed, and the job's last line;
- :mod:`.processes`: the workers, the orphan watcher, the process's end;
- :mod:`.signals`: stops by a signal, and passing SIGUSR1/SIGUSR2 on;
- :mod:`.store`: torchrun_jsc's store connection and its protocol;
- :mod:`.requeue`: the requeue's decisions and its sequence;
- beside them, this node's account of the job's failures (``ledger``, above ``store``, below
  ``requeue``), the session that wires the watch into torch (``session``, ``session_end``,
  ``session_failover``) and its parts (``beating``, ``rounds``, ``spares``, ``host_place``,
  ``relaunch``), the plan's facts about this node (``node``) and the watch's bounds
  (``timing``).

The patches in :mod:`torchrun_jsc.patches` install them; the plan decides which."""
