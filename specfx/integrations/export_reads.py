"""Guards that an exported program checks per call by asking the input, not its fake value.

Under ``torch.export`` a guard's lowered check (``_checks/lowered.py``) sees FakeTensors and
the exporting thread's modes: a decision on ``x.is_contiguous()``, ``x.requires_grad``,
``type(x)``, ``hasattr(x, ...)``, the layout or dtype, grad mode or autocast is answered
once, while exporting, and the program would return the traced branch's answer on an input
eager sends elsewhere. :func:`run_time_reads` rewrites those guard nodes (in the copy
``lower_guards`` exports) into :func:`check_read`, which calls the custom operator
``specfx::check`` (``_checks/probes.py``) on the tensor the decision read: it raises
specfx's GuardError with this input's value, and its result is asserted so that export,
PT2E and ``ep.module()`` keep it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx
from torch.fx.node import has_side_effect

from .._capture.tracer import autocast_enabled
from .._checks.lowered import one_line
from .._checks.probes import READABLE_ATTRIBUTES, READABLE_METHODS, check, render
from .._graph.retrace import grad_enabled
from .._policy.messages import exported_guard_failure
from .. import guards

__all__ = ["check_read", "run_time_reads"]


def check_read(value: torch.Tensor, read: str, expected: str, what: str, where: str) -> torch.Tensor:
    """A decision on ``read`` of ``value`` checked per call (``specfx::check``, asserted); the
    asserted result, for ``specfx.guarded`` to put in the program's data flow."""
    message = exported_guard_failure(f"{what} == {expected}", f"{what} != {expected}", where)
    holds = check(value, read, expected, what, where)
    torch.ops.aten._assert_async.msg(holds, one_line(message))
    return holds


has_side_effect(check_read)  # dead-code elimination keeps it

_GRAD_MODE_READS = (torch.is_grad_enabled, torch._C.is_grad_enabled, grad_enabled)


def _is_tensor(node: Any) -> bool:
    kind = node.meta.get("type") if isinstance(node, torch.fx.Node) else None
    return isinstance(node, torch.fx.Node) and (
        "tensor_meta" in node.meta or (isinstance(kind, type) and issubclass(kind, torch.Tensor)))


def _anchor(graph: torch.fx.Graph) -> Optional[torch.fx.Node]:
    """The program's first tensor input: what reads of grad mode and autocast are called on."""
    return next((node for node in graph.find_nodes(op="placeholder") if _is_tensor(node)), None)


def _spelled(argument: Any) -> Optional[str]:
    if isinstance(argument, bool) or not isinstance(argument, (int, torch.memory_format)):
        return None
    return str(argument).replace("torch.", "")


def _read_of(value: Any, anchor: Optional[torch.fx.Node]) -> Optional[Tuple[Any, str]]:
    """(tensor, read) when ``value`` is a node reading what export answers once: a tensor's
    metadata (``x.is_contiguous()``, ``x.stride(0)``, ``x.requires_grad``), grad mode, autocast."""
    if not isinstance(value, torch.fx.Node) or value.op not in ("call_method", "call_function"):
        return None
    subject = value.args[0] if value.args else None
    if value.op == "call_method" and value.target in READABLE_METHODS and _is_tensor(subject):
        arguments = [_spelled(a) for a in value.args[1:]]
        arguments += [f"{k}={_spelled(v)}" if _spelled(v) is not None else None for k, v in value.kwargs.items()]
        if None in arguments:
            return None
        return subject, "|".join([str(value.target), *(a for a in arguments if a is not None)])
    if (value.target is getattr and _is_tensor(subject) and len(value.args) == 2
            and value.args[1] in READABLE_ATTRIBUTES):
        return subject, f"attr:{value.args[1]}"
    if anchor is not None and value.target in _GRAD_MODE_READS:
        return anchor, "grad_enabled"
    if anchor is not None and value.target is autocast_enabled:
        return anchor, f"autocast:{value.args[0]}"
    return None


# guards on a tensor itself: guard -> (read, expected, what, where) from the guard's arguments
_ON_TENSORS: Dict[Callable[..., None], Callable[[tuple], Tuple[str, Any, str, str]]] = {
    guards.guard_type: lambda args: ("type", args[1], args[2], args[3]),
    guards.guard_has_attr: lambda args: (f"hasattr:{args[1]}", args[2], args[3], args[4]),
    guards.guard_layout: lambda args: ("attr:layout", args[1], args[2], args[3]),
    guards.guard_dtype: lambda args: ("attr:dtype", args[1], args[2], args[3]),
}
# guards handed a value read elsewhere: (value, expected, what, where)
_ON_VALUES = frozenset({guards.guard_truth, guards.guard_value, guards.guard_int, guards.guard_index,
                        guards.guard_grad_enabled})


def _checked_per_call(node: torch.fx.Node, anchor: Optional[torch.fx.Node]) -> Optional[tuple]:
    """The arguments of :func:`check_read` that check ``node``'s guard per call, or None."""
    if node.target in _ON_TENSORS and node.args and _is_tensor(node.args[0]):
        read, expected, what, where = _ON_TENSORS[node.target](node.args)
        return node.args[0], read, render(expected), what, where
    if node.target in _ON_VALUES:
        found = _read_of(node.args[0], anchor)
        if found is not None:
            return found[0], found[1], render(node.args[1]), node.args[2], node.args[3]
    return None


def run_time_reads(graph: torch.fx.Graph) -> None:
    """Rewrite, in place, the guard nodes of ``graph`` whose decision export would answer once
    into :func:`check_read` calls (the reads they replace become dead code)."""
    anchor = _anchor(graph)
    for node in graph.nodes:
        if node.op == "call_function":
            checked = _checked_per_call(node, anchor)
            if checked is not None:
                node.target, node.args, node.kwargs = check_read, checked, {}
