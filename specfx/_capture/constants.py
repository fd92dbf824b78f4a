"""Constants the generated code cannot spell are read from attributes of the graph.

torch.fx writes a constant argument into the generated code as its ``repr()``. That is
Python for ints, floats, strings, dtypes, devices and sizes, but not for every value model
code passes: numpy 2 prints ``np.float64(0.9)`` (a ``float`` subclass, so torch.fx takes
it as a number) and the generated code has no ``np``; a numpy array, a ``numpy.float32``
or a ``numpy.dtype`` has no spelling at all. Such a value is stored on the graph as an
attribute (``_specfx_constant0``, removed from the model with the trace's other changes)
and read by a ``get_attr`` node, so the graph runs, re-traces and pickles with the value
itself. An array is copied at each read (``.copy()``): eager code builds a new one per
call, and a caller that changes the array it got must not change the graph's.

>>> import numpy as np, torch, specfx
>>> def scale(x):
...     return x * np.float64(0.9), np.arange(3)
>>> gm = specfx.trace(scale, torch.ones(2))
>>> gm(torch.ones(2))
(tensor([0.9000, 0.9000]), array([0, 1, 2]))
>>> "np." in gm.code
False
"""

from __future__ import annotations

import enum
from typing import Any, Dict, Tuple

from .session import TraceSession

__all__ = ["GraphConstants", "needs_attribute"]

# the types whose repr() is what torch.fx writes, and reads back as the same value
_SPELLED = frozenset({int, float, complex, str, bool})


def needs_attribute(value: Any) -> bool:
    """Whether generated code cannot spell ``value`` (numpy values, number subclasses)."""
    kind = type(value)
    if kind.__module__ == "numpy" or kind.__module__.startswith("numpy."):
        return not isinstance(value, type)  # (a numpy type itself is named by its import path)
    return (isinstance(value, (int, float, complex, str)) and kind not in _SPELLED
            and not isinstance(value, enum.Enum))  # (enum members torch.fx names as Class.MEMBER)


class GraphConstants:
    """The constant attributes one trace adds to the graph."""

    def __init__(self, tracer: TraceSession) -> None:
        self._tracer = tracer
        self._names: Dict[int, Tuple[Any, str]] = {}  # id -> (the value, kept alive; its attribute)

    def node(self, value: Any) -> Any:
        """The node that reads ``value`` when the graph runs."""
        known = self._names.get(id(value))
        if known is None:
            name = self._tracer.get_fresh_qualname("_specfx_constant")
            setattr(self._tracer.root, name, value)
            known = self._names[id(value)] = (value, name)
        read = self._tracer.create_node("get_attr", known[1], (), {})
        if type(value).__name__ == "ndarray":
            return self._tracer.create_node("call_method", "copy", (read,), {})
        return read
