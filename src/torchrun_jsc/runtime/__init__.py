"""What runs inside the agent process after the launch, in rooms by concept (each package's
docstring says what it holds and what it may import):

- :mod:`.watch`: the job watch's decisions, pure (vocabulary, ``decide``, quorum, heartbeats);
- :mod:`.records`: what failed, and the job's last line;
- :mod:`.processes`: the workers, the orphan watcher, the process's end;
- :mod:`.signals`: stops by a signal, and passing SIGUSR1/SIGUSR2 on;
- :mod:`.store`: torchrun_jsc's store connection and its protocol;
- :mod:`.requeue`: the requeue's decisions and its sequence;
- :mod:`.recovery`: going on after a lost node (rounds, spares, the host's place);
- :mod:`.failover`: the handover to the next rendezvous host, and starting the agent again;
- :mod:`.session`: the job watch wired into torch (the adapter of torch's hooks, the process's
  end, the heartbeat threads, this node's account of the failures and the last line);
- beside them, a leaf every room may import: the watch's bounds (``timing``);
- above them all, this process's one runtime object (``agent``), which holds the session.

The patches in :mod:`torchrun_jsc.patches` install them; the plan decides which."""
