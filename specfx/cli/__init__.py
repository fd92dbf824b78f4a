"""Layer 9 — ``python -m specfx`` and the ``specfx`` console script (``commands``), and the
demo's models (``demo``)."""

from .commands import main, parse_input

__all__ = ["main", "parse_input"]
