"""Guards in the data flow: a graph's output depends on its guards, so a consumer that
deletes the nodes nothing uses, or the assertion ops, cannot delete the checks.

A guard returns nothing and is kept by dead-code elimination only because torch.fx knows it
as side-effectful (``has_side_effect``). Consumers with their own graph passes do not ask:
Sony MCT rebuilds the model from the nodes an output depends on, ExecuTorch's
``to_executorch()`` erases every ``aten._assert_async`` (``RemoveGraphAssertsPass``) and then
the dead code. An input that takes eager's other branch would get the traced branch's answer
from such a program, silently. So :func:`thread_guards` routes one tensor the graph returns
through :func:`guarded`, whose arguments are the graph's guard nodes:

- run on values, ``guarded(value, *checks)`` returns ``value`` (the guards before it have
  raised or returned None);
- re-traced by any torch.fx tracer (``symbolic_trace(gm)``, MCT's, Brevitas'), it records itself,
  so the re-traced graph keeps the guards as arguments of a node the output depends on;
- under ``torch.export`` each guard lowers to its assertion and hands back the condition it
  asserted (``specfx/_checks/lowered.py``); ``guarded`` then makes the returned tensor depend
  on them: ``value.unsqueeze(0).index_select(0, index).squeeze(0)`` with ``index`` 0 when every
  condition holds, else 1, out of range. Run by torch, the assertion fires first with specfx's
  message; in a runtime whose passes erased the assertions (an ExecuTorch ``.pte``) the
  index check is still computed, and the out-of-range index makes the call fail.

>>> import torch, specfx
>>> gm = specfx.trace(lambda x: x * 2 if x.sum() > 0 else -x, torch.ones(2), policy="bool")
>>> [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"][-1]
'guarded'
>>> guarded(torch.ones(2), None, None)
tensor([1., 1.])
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch
import torch.fx
from torch.fx.proxy import Proxy

from ..guards import GUARD_FUNCTIONS, _is_foreign_proxy

__all__ = ["brevitas_checks", "flow_checks", "guarded", "is_guard_node", "thread_guards"]


def _proxy_tracer(values: tuple) -> Any:
    for value in values:
        if isinstance(value, torch.Tensor) or value is None:
            continue
        if isinstance(value, Proxy) or _is_foreign_proxy(value):
            return value.tracer
    return None


def guarded(value: Any, *checks: Any) -> Any:
    """``value``, after the guards ``checks`` (their results: None at run time, the asserted
    conditions under ``torch.export``)."""
    for check in checks:  # a plain call: every guard before it returned None
        if check is not None:
            break
    else:
        if not (isinstance(value, Proxy) or _is_foreign_proxy(value)):
            return value
    tracer = _proxy_tracer((value, *checks))
    if tracer is not None:  # re-traced: record the call, so the re-traced output depends on the guards
        if not isinstance(tracer, torch.fx.Tracer):  # another FX copy (Brevitas'): see brevitas_checks
            checks = tuple(brevitas_checks(checks, lambda check: getattr(check, "__dict__", {}).get("node")))
        return tracer.create_proxy("call_function", guarded, (value, *checks), {}, name="guarded")
    if torch.compiler.is_compiling() and not torch.compiler.is_dynamo_compiling():
        return flow_checks(value, checks)
    return value


guarded.__module__ = "specfx"  # generated code and pickles import it from the public package


def brevitas_checks(checks: tuple, node_of: Callable[[Any], Any]) -> List[Any]:
    """The checks a Brevitas graph's ``guarded`` takes: not the guards on a module's output.
    Those are named as element reads (``getitem_guard_len``, see ``guards.guard_node_name``) so
    that Brevitas takes the output for a tuple, and Brevitas puts an output quantizer after
    every used element read, which a guard's None would reach. Unused, they stay: Brevitas'
    dead-code elimination keeps side-effectful calls, and the guards are registered with it."""
    return [check for check in checks if not str(getattr(node_of(check), "name", "")).startswith("getitem_")]


def flow_checks(value: Any, checks: tuple) -> Any:
    """``value`` made to depend on the tensor conditions among ``checks`` (an exported program):
    the same tensor when all hold, an out-of-range ``index_select`` when one does not."""
    conditions: List[torch.Tensor] = [c for c in checks if isinstance(c, torch.Tensor)]
    if not conditions or not isinstance(value, torch.Tensor):
        return value
    aten = torch.ops.aten  # (aten calls: no dtype-metadata assertions around each conversion)
    holds = None
    for condition in conditions:
        if condition.dtype != torch.bool:  # a symbolic size's condition: scalar_tensor's float 0 or 1
            condition = aten.ne.Scalar(condition, 0)
        holds = condition if holds is None else aten.logical_and.default(holds, condition)
    index = aten.view.default(aten._to_copy.default(aten.logical_not.default(holds), dtype=torch.int64), [1])
    if index.device != value.device:
        index = aten._to_copy.default(index, device=value.device)
    return aten.squeeze.dim(aten.index_select.default(aten.unsqueeze.default(value, 0), 0, index), 0)


def is_guard_node(node: torch.fx.Node, extra: Callable[[Any], bool] = lambda target: False) -> bool:
    return node.op == "call_function" and (node.target in GUARD_FUNCTIONS or extra(node.target))


def _returned_tensor(output: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The first node the graph returns that holds a tensor."""
    found: List[torch.fx.Node] = []

    def visit(node: torch.fx.Node) -> torch.fx.Node:
        if not found and ("tensor_meta" in node.meta or node.meta.get("type") is torch.Tensor
                          or isinstance(node.meta.get("val"), torch.Tensor)):
            found.append(node)
        return node

    torch.fx.node.map_arg(output.args, visit)
    return found[0] if found else None


def thread_guards(graph: torch.fx.Graph, extra: Callable[[Any], bool] = lambda target: False) -> bool:
    """Route the first tensor ``graph`` returns through one :func:`guarded` call taking every
    guard node (and every node ``extra`` says is a check). A graph that has one (re-traced)
    keeps it, with the guards it has now. Returns whether the graph changed."""
    output = next(iter(graph.find_nodes(op="output")), None)
    checks = [node for node in graph.nodes if is_guard_node(node, extra)]
    joins = [node for node in graph.nodes if node.op == "call_function" and node.target is guarded]
    if joins:
        for extra_join in joins[1:]:
            extra_join.replace_all_uses_with(extra_join.args[0])
            graph.erase_node(extra_join)
        join = joins[0]
        if list(join.args[1:]) == checks and len(joins) == 1:
            return False
        join.args = (join.args[0], *checks)
        return True
    returned = _returned_tensor(output) if output is not None else None
    if not checks or returned is None or output is None:
        return False
    with graph.inserting_before(output):
        joined = graph.call_function(guarded, (returned, *checks))
    joined.meta = {key: returned.meta[key] for key in ("tensor_meta", "type", "val") if key in returned.meta}
    seen: List[torch.fx.Node] = []

    def replace_first(node: torch.fx.Node) -> torch.fx.Node:
        if node is returned and not seen:
            seen.append(node)
            return joined
        return node

    output.args = torch.fx.node.map_arg(output.args, replace_first)
    return True
