"""``python -m torchrun_jsc.report FILE...``: a whole job from its event logs, across its runs
(``job``, pure: the runs, their gaps and the table), and its timeline as a picture (``plot``:
the rows, pure, and their drawing with matplotlib, the ``report`` extra)."""
