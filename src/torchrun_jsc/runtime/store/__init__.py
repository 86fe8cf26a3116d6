"""The rendezvous store as the job watch uses it: torchrun_jsc's own connection
(``connection``), every key and encoding behind verbs (``protocol``) and store calls run with a
bound (``bounded``). Of the runtime it imports only ``records.report``."""
