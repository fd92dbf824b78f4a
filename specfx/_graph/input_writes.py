"""Which of the lists and dicts given to forward it wrote to while it was traced.

A graph computes values and writes tensors in place; it cannot append to its caller's list
(a KV cache), set or delete a key of its caller's dict, or pop from a list. Traced, such a
write acts on the trace's copy and is dropped: the graph would return eager's values while
the caller's containers stayed as they were. :class:`ContainerSnapshot` remembers what each
container reachable from the arguments held (element objects, by identity) when forward was
called, and tells after it returns which ones it changed; the tracer refuses the trace then.

A tensor element written in place (``xs[0] += 1``, which stores the result of ``iadd`` back)
is the same object in eager, and the graph repeats the in-place op: not a change.
"""

from __future__ import annotations

import operator
from typing import Any, List, Set, Tuple

from torch.fx.node import Node
from torch.fx.proxy import Proxy

__all__ = ["ContainerSnapshot"]

_IN_PLACE_OPERATORS = frozenset({operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                                 operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                                 operator.ilshift, operator.irshift, operator.imatmul})


class ContainerSnapshot:
    """The lists and dicts reachable from ``arguments`` (pairs of the argument's name in the
    user's terms and its value), with what each held.

    >>> xs = [1, 2]
    >>> snapshot = ContainerSnapshot([("xs", xs)])
    >>> xs.append(3)
    >>> snapshot.writes()
    ['xs: 1 element(s) added (length 2 -> 3)']
    """

    def __init__(self, arguments: List[Tuple[str, Any]]) -> None:
        self._seen: List[Tuple[str, Any, Any]] = []  # (label, container, contents)
        visited: Set[int] = set()
        for label, value in arguments:
            self._visit(label, value, visited)

    def _visit(self, label: str, value: Any, visited: Set[int]) -> None:
        if isinstance(value, (list, dict)) and id(value) not in visited:
            visited.add(id(value))
            self._seen.append((label, value, _contents(value)))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                self._visit(f"{label}[{key!r}]", item, visited)
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                self._visit(f"{label}[{index}]", item, visited)

    def writes(self) -> List[str]:
        """One line per container that changed, in the user's terms."""
        found = []
        for label, container, before in self._seen:
            after = _contents(container)
            if after != before:
                found.append(f"{label}: {_change(container, before, after)}")
        return found


def _contents(container: Any) -> Any:
    if isinstance(container, dict):
        return tuple((key, _identity(value)) for key, value in container.items())
    return tuple(_identity(value) for value in container)


def _identity(value: Any) -> int:
    """Which object ``value`` is in eager: a traced tensor written in place is the tensor it
    was written through."""
    if not isinstance(value, Proxy):
        return id(value)
    node = value.node
    while node.args and isinstance(node.args[0], Node) and (
            (node.op == "call_function" and node.target in _IN_PLACE_OPERATORS)
            or (node.op == "call_method" and isinstance(node.target, str) and node.target.endswith("_")
                and not node.target.startswith("_"))):
        node = node.args[0]
    return id(node)


def _change(container: Any, before: Any, after: Any) -> str:
    if isinstance(container, dict):
        old, new = dict(before), dict(after)
        parts = [f"key {k!r} added" for k in new if k not in old]
        parts += [f"key {k!r} removed" for k in old if k not in new]
        parts += [f"key {k!r} set" for k in new if k in old and old[k] != new[k]]
        return ", ".join(parts) or "keys reordered"
    if len(after) != len(before):
        verb = "added" if len(after) > len(before) else "removed"
        return f"{abs(len(after) - len(before))} element(s) {verb} (length {len(before)} -> {len(after)})"
    changed = [str(i) for i, (a, b) in enumerate(zip(before, after)) if a != b]
    return f"element(s) {', '.join(changed)} replaced"
