"""Draws from Python's ``random`` in traced code are graph nodes; a draw that decides is refused.

While specfx traces with example inputs, ``random.random()``, ``random.uniform(a, b)``,
``random.randint(a, b)``, ... called by model code return a traced value: a node calling
:func:`specfx.python_random <specfx._graph.python_random.python_random>`, whose example is
a real draw (the state keeper puts Python's generator back after the trace). The graph
draws at every call, as eager does. A value that only flows into tensor ops, or is never
used (``p = random.uniform(0, 1); if self.training and p < self.layerdrop`` in eval mode),
is reproduced exactly; a decision taken on one (``bool(p < 0.1)``, ``int(p)``) would freeze
one draw's branch, and is refused whatever the policy.

Draws that pick from or reorder a sequence (``choice``, ``choices``, ``sample``,
``shuffle``) stay refused by ``ambient.py``.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, Optional

from torch.fx import Node

from . import patches as _patches
from .._graph.python_random import python_random
from .session import TraceSession

__all__ = ["DRAWS", "PythonDraws", "install"]

# the functions of `random` that draw a number from numbers
DRAWS = ("random", "uniform", "randint", "randrange", "gauss", "normalvariate", "betavariate",
         "expovariate", "getrandbits", "triangular")


class PythonDraws:
    """Which nodes of one trace derive from a Python draw (asked before each decision)."""

    def __init__(self) -> None:
        self.any = False  # no draw yet: decisions skip the walk
        self._behind: Dict[Node, Optional[Node]] = {}  # node -> the draw it derives from, or None

    def draw_behind(self, node: Node) -> Optional[Node]:
        """The draw node ``node`` derives from, if any (memoized: each node is walked once)."""
        memo = self._behind
        stack = [node]
        while stack:
            current = stack[-1]
            if current in memo:
                stack.pop()
                continue
            if current.op == "call_function" and current.target is python_random:
                memo[current] = current
                stack.pop()
                continue
            pending = [n for n in current.all_input_nodes if n not in memo]
            if pending:
                stack.extend(pending)
                continue
            memo[current] = next((memo[n] for n in current.all_input_nodes if memo[n] is not None), None)
            stack.pop()
        return memo[node]


def install(tracer: TraceSession, draws: PythonDraws) -> None:
    """Inside the trace's patch session: model code's Python draws become nodes."""
    for name in DRAWS:
        _patches.patch(random, name, _recording(tracer, draws, name))


def _recording(tracer: TraceSession, draws: PythonDraws, name: str) -> Callable[..., Any]:
    def draw(*args: Any, **kwargs: Any) -> Any:
        if not tracer.records_factories():  # (specfx computing the node's example value, another thread)
            return _patches.previous(random, name)(*args, **kwargs)
        draws.any = True
        return tracer.create_proxy("call_function", python_random, (name, *args), kwargs, name=name)

    draw.__name__ = name
    return draw
