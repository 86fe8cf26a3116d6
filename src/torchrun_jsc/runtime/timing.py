"""How long the job watch waits for what (seconds). One home for these bounds: every wait of
the watch is one of them, or the peer timeout, or torch's grace."""

from __future__ import annotations

#: How long the node serving the store waits, at a failure, for the others to read the records,
#: and at a completed job's end for the waiting spares to end.
LINGER = 10.0
#: How long a node waits for the other nodes' records before it prints the first failure, on
#: top of the time they may take to notice (torch's monitor interval, the heartbeat interval).
SETTLE = 3.0
#: How long, after stopping its workers, the agent may take to end by itself.
EXIT_GRACE = 10.0
#: The longest any store operation of the stopping and exit paths may take.
STORE_WAIT = 5.0
#: How long the process's end waits for the job watch's threads to leave their store call.
QUIESCE_WAIT = 2.0
#: At the end, a store operation of this agent's running longer than this is taken as hanging
#: (the host is gone): the last line is then made from this node's own records.
HANG = 2.0
#: How long a failure report waits for a worker's exit to be noted (its watch thread may not
#: have run since, on a loaded node): the order of a node's failures rests on it.
EXIT_NOTE_WAIT = 2.0
#: The operation timeout of torchrun_jsc's own store connection when peers are not watched.
STORE_TIMEOUT = 30.0
#: How often the watchdog looks at the store connection.
WATCHDOG_EVERY = 1.0
#: The longest one ``scontrol`` call of the requeue may take.
SCONTROL_WAIT = 10.0
#: How long a node waits for the serving node's word on whether the job can be requeued.
REQUEUE_VERDICT_WAIT = 10.0
#: How long the serving node waits, beyond the workers' grace, for every member to be ready.
REQUEUE_READY_WAIT = 30.0
#: How long a node waits for the outcome of a requeue another node carries out.
REQUEUE_OUTCOME_WAIT = LINGER + SETTLE + 3 * SCONTROL_WAIT
#: At a failure, a member that wrote no record and whose heartbeat has been quiet for this many
#: heartbeat intervals vanished (its processes were killed: the others' collectives broke
#: because of it): the watcher names it lost, so that the first failure is that node.
VANISHED_BEATS = 3.0
#: Quiet for more than this many intervals (but not yet the above), such a member may have
#: vanished: the watcher waits for it to be one or the other, past the settle time (a live
#: member's counter is seen to move at every read, about one interval apart).
SUSPECT_BEATS = 1.0
#: How long an agent that hands over may take to start again and serve.
HANDOVER_START = 60.0
#: How long the rendezvous host waits, at its end, for its event log's last lines to be
#: written and read back for the summary (each).
EVENTS_WAIT = 5.0
#: How long the round's event waits for its members to say who they are (their heartbeat
#: threads introduce them as they start).
NAMES_WAIT = 10.0
