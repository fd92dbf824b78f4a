"""Naming traced values in the user's terms, for messages and records.

A graph node is named by the expression that computed it, rebuilt from the graph
(``x.sum() > 0``, ``kwargs['attention_mask']``, ``torch.chunk(x, 2)``), never by its
FX name (``gt_1``); and by the inputs it depends on (JAX's "depends on argument
``x``"). Both are computed only when a decision is recorded or refused.
"""

from __future__ import annotations

import operator
from types import MappingProxyType
from typing import Any, Dict, Mapping, Tuple

import torch
from torch.fx.node import Node

__all__ = ["Describer", "depends_on_text", "function_path", "is_input_path"]

_NO_NAMES: Mapping[Node, str] = MappingProxyType({})
_LIMIT = 60  # longer expressions elide their inner parts
_BINARY = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
    operator.gt: ">", operator.ge: ">=", operator.lt: "<", operator.le: "<=", operator.eq: "==",
    operator.ne: "!=", operator.and_: "&", operator.or_: "|", operator.xor: "^",
    operator.lshift: "<<", operator.rshift: ">>", operator.contains: "in",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}


def input_name(node: Node) -> str:
    """The argument a placeholder stands for (``*args`` -> ``args``; a leaf of a container
    input by its key path, ``batch['ids']``, as _structure.py records it)."""
    return node.meta.get("specfx_input") or str(node.target).lstrip("*")


def depends_on_text(inputs: Tuple[str, ...]) -> str:
    """``depends on argument `x``` / ``depends on arguments `x` and `y``` / ``depends on no input``."""
    if not inputs:
        return "depends on no input"
    quoted = [f"`{name}`" for name in inputs]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
    return f"depends on argument{'s' if len(inputs) > 1 else ''} {listed}"


class Describer:
    """Names and input dependencies of the nodes of one graph (memoized)."""

    def __init__(self) -> None:
        self._inputs: Dict[Node, Tuple[str, ...]] = {}
        self._distinct: Dict[Tuple[str, ...], Tuple[str, ...]] = {}

    def name(self, node: Any, depth: int = 0, local_names: Mapping[Node, str] = _NO_NAMES) -> str:
        """The expression that computed ``node``, in Python syntax; a node the user's
        code holds in a variable (``local_names``) is named by that variable."""
        if isinstance(node, (list, tuple)) and not isinstance(node, torch.Size):
            items = ", ".join(self.name(item, depth + 1, local_names) for item in node)
            return f"[{items}]" if isinstance(node, list) else f"({items}{',' if len(node) == 1 else ''})"
        if not isinstance(node, Node):
            return _constant(node)
        if node in local_names:
            return local_names[node]
        if depth > 4:
            return "…"
        text = self._expression(node, depth, local_names)
        if depth and len(text) > _LIMIT:
            return "…"
        return text

    def _expression(self, node: Node, depth: int, local_names: Mapping[Node, str]) -> str:
        op, target, args = node.op, node.target, node.args
        if op == "placeholder":
            return input_name(node)
        if op == "get_attr":
            return f"self.{target}"
        inner = [self._operand(a, depth + 1, local_names) for a in args]
        keywords = [f"{k}={self.name(v, depth + 1, local_names)}" for k, v in node.kwargs.items()]
        if op == "call_method":
            return f"{inner[0]}.{target}({', '.join(inner[1:] + keywords)})"
        if op == "call_module":
            return f"self.{target}({', '.join(inner + keywords)})"
        if target is operator.getitem and len(args) == 2:
            key = args[1]
            return f"{inner[0]}[{self.name(key, depth + 1, local_names) if isinstance(key, Node) else _index(key)}]"
        if target is getattr and len(args) == 2:
            return f"{inner[0]}.{args[1]}"
        if target in _BINARY and len(args) == 2:
            if target is operator.contains:
                return f"{inner[1]} in {inner[0]}"
            return f"{inner[0]} {_BINARY[target]} {inner[1]}"
        if target in _UNARY and len(args) == 1:
            return f"{_UNARY[target]}{inner[0]}"
        positional = [self.name(a, depth + 1, local_names) for a in args]
        return f"{_function_name(target)}({', '.join(positional + keywords)})"

    def _operand(self, value: Any, depth: int, local_names: Mapping[Node, str]) -> str:
        text = self.name(value, depth, local_names)
        if isinstance(value, Node) and value not in local_names and value.op == "call_function" and (
            value.target in _BINARY or value.target in _UNARY
        ):
            return f"({text})"
        return text

    def depends_on(self, node: Node) -> Tuple[str, ...]:
        """The inputs (by key path: ``x``, ``xs[1]``, ``kwargs['mask']``) ``node`` was computed from."""
        known = self._inputs
        if node in known:
            return known[node]
        stack = [node]
        while stack:  # iterative: graphs are deeper than Python's recursion limit
            current = stack[-1]
            if current in known:
                stack.pop()
                continue
            if is_input_path(current):
                known[current] = (self.name(current),)
                stack.pop()
                continue
            pending = [a for a in current.all_input_nodes if a not in known]
            if pending:
                stack.extend(pending)
                continue
            found = tuple(sorted({name for a in current.all_input_nodes for name in known[a]}))
            known[current] = self._distinct.setdefault(found, found)  # (most nodes share a few)
            stack.pop()
        return known[node]


def is_input_path(node: Node) -> bool:
    """An input, or a constant-key element of one (``xs[1]``, ``kwargs['mask']``)."""
    while node.op == "call_function" and node.target is operator.getitem and not isinstance(node.args[1], Node):
        if not isinstance(node.args[1], (int, str)):
            return False
        node = node.args[0]  # type: ignore[assignment]
        if not isinstance(node, Node) or not issubclass(node.meta.get("type", object), (list, tuple, dict)):
            return False  # an element of a container, not an index into a tensor
    return node.op == "placeholder"


def _index(index: Any) -> str:
    if isinstance(index, tuple):
        return ", ".join(_index(i) for i in index) if index else "()"
    if isinstance(index, slice):
        parts = ["" if p is None else _constant(p) for p in (index.start, index.stop, index.step)]
        return ":".join(parts[:2]) if index.step is None else ":".join(parts)
    if index is Ellipsis:
        return "..."
    return _constant(index)


def _constant(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."


def _function_name(target: Any) -> str:
    name = getattr(target, "__name__", None)
    if name is None:
        return repr(target)
    for prefix, namespace in (("torch", torch), ("F", torch.nn.functional)):
        if getattr(namespace, name, None) is target:
            return f"{prefix}.{name}"
    return name


def function_path(target: Any) -> str:
    """A function as the user's code calls it: ``torch.cat`` (not the
    ``torch._VariableFunctionsClass.cat`` its ``__qualname__`` says), ``torch.nn.functional.relu``,
    else ``module.qualname``.

    >>> function_path(torch.cat), function_path(torch.nn.functional.relu), function_path(len)
    ('torch.cat', 'torch.nn.functional.relu', 'builtins.len')
    """
    name = getattr(target, "__name__", None)
    if name is None:
        return repr(target)
    for prefix, namespace in (("torch", torch), ("torch.nn.functional", torch.nn.functional),
                              ("torch.linalg", torch.linalg), ("torch.special", torch.special),
                              ("torch.fft", torch.fft)):
        if getattr(namespace, name, None) is target:
            return f"{prefix}.{name}"
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__qualname__', name)}".lstrip(".")
