"""What runs inside the agent process after the launch: the worker guard and registry
(``workers``), torchrun_jsc's own store connection (``jobstore``), heartbeats (``heartbeats``),
failure records (``report``), and the job watch: its states and decisions (``watch``), the
store protocol (``protocol``), its effects (``ledger``, ``beating``, ``failures``) and the
session that wires them into torch (``session``). The patches in
:mod:`torchrun_jsc.patches` install them; the plan decides which."""
