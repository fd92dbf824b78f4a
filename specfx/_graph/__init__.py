"""Layer 4 — what a produced GraphModule carries and imports at call time: the records
(``specialization``, ``records``), structured entry and exit (``structure``), calls a stock
tracer can re-trace (``retrace``), the report (``report``) and loading records safely
(``safe_load``).

Nothing here imports the tracer: loading and running a saved graph never needs it.
"""
