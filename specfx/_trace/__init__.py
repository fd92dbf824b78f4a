"""Layer 6 — ``trace()`` and its arguments: binding and checking what it is given
(``options``), driving the tracer (``trace``), ``check_inputs`` (``check``)."""
