"""The job's event log: what the launcher decided and saw, one JSON object per line
(``entry``, pure: the documented events and their encoding), the rendezvous host's writer
(``log``) and the run's summary line (``summary``, pure). Of the runtime it imports only
``processes`` and ``timing``; :mod:`torchrun_jsc.report` reads the files."""
