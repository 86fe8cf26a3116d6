"""The ``TORCHRUN_JSC_*`` settings: the table of every variable and the settings read from it
(``table``), the parsers of the values and their bounds (``values``) and the requeue's rows
(``requeue``)."""
