"""What failed, as values: one node's record and the job's one last line (``report``, pure),
and this node's account of how its workers ended (``failures``). Of the
runtime it imports only ``processes`` and ``timing``."""
