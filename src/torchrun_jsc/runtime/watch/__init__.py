"""The job watch's decisions, pure: its vocabulary (phases, state, configuration, events,
actions), :func:`~.machine.decide`, who may go on after a loss (``quorum``) and who is alive
(``heartbeats``). Of the runtime it imports only ``timing`` and ``records.report`` (and
:mod:`torchrun_jsc.handover`); no I/O."""
