"""Failover: who hosts the next round when the rendezvous host is lost, and the handover to it
(``succession``), and this agent process started again at the next host (``relaunch``). It
imports ``store``, ``processes``, the watch's vocabulary, ``timing`` and
:mod:`torchrun_jsc.handover`; the session and the command line import it."""
