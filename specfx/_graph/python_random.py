"""Python's ``random`` draws, made when the graph runs.

A draw from Python's global generator in traced code (``p = random.uniform(0, 1)``, the
LayerDrop idiom) is recorded as a call of :func:`python_random`: the graph draws anew at
every call, advancing Python's generator exactly as eager does. (A draw whose value decides
something during the trace is refused by the tracer: the branch would follow one draw.)
"""

from __future__ import annotations

import random
from typing import Any

from torch.fx._symbolic_trace import is_fx_symbolic_tracing
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy, TraceError

from .._policy.messages import frozen_python_draw

__all__ = ["python_random"]


def python_random(name: str, *args: Any, **kwargs: Any) -> Any:
    """``random.<name>(*args, **kwargs)``: what generated code calls for a draw of Python's
    ``random`` module (kept by dead-code elimination even when the value is unused, since
    the draw advances the generator).

    >>> import random, torch, specfx
    >>> def noisy(x):
    ...     return x * random.uniform(0.5, 1.5)
    >>> gm = specfx.trace(noisy, torch.ones(2))
    >>> random.seed(0); graph = gm(torch.ones(2))
    >>> random.seed(0); eager = noisy(torch.ones(2))
    >>> torch.equal(graph, eager)
    True
    """
    value = getattr(random, name)(*args, **kwargs)
    if not isinstance(value, Proxy) and is_fx_symbolic_tracing():
        # another tracer (torch.fx's symbolic_trace, a quantizer's) is tracing the graph's code: its
        # graph would hold this one draw as a constant, the same number on every call
        raise TraceError(frozen_python_draw(name))
    return value


python_random.__module__ = "specfx"  # generated code and pickles import it from the public package
has_side_effect(python_random)
