"""Brevitas integration: hand specfx graphs to Brevitas' graph quantization.

Importing this module imports Brevitas (``import specfx`` never does). Brevitas'
documented recipe works on a specfx graph as it is::

    graph = preprocess_for_quantize(copy.deepcopy(gm))   # re-traces with Brevitas' tracer
    quantized = quantize(graph)

and every guard stays in the quantized graph. Brevitas' graph passes run on its
own copy of torch.fx, whose ``Node`` class is not torch.fx's. Its tracer
re-creates the graph in that copy; without the re-trace
(``preprocess_for_quantize(gm, trace_model=False)``, ``quantize(gm)``) a torch.fx
graph reaches those passes as it is, and every rewiring they make is silently
skipped (their ``map_arg`` maps only their own ``Node`` class): a model with a
``cat`` or ``add`` then loops in Brevitas' ``residual_handler`` for hours.
:func:`to_brevitas_graph` makes the Brevitas graph without re-tracing.

Importing this module also registers the guards as side-effectful in Brevitas'
copy of torch.fx, so its dead-code elimination keeps them (a guard that records
itself on Brevitas' tracer registers them too).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from brevitas.backport.fx import node as _brevitas_node  # type: ignore[import-untyped]
from brevitas.backport.fx.graph import Graph as BrevitasGraph  # type: ignore[import-untyped]
from brevitas.backport.fx.graph_module import GraphModule as BrevitasGraphModule  # type: ignore[import-untyped]

from .._graph.guard_flow import brevitas_checks, guarded
from .._graph.records import RECORDS, keep_records
from .._graph.structure import is_plain
from ..guards import GUARD_FUNCTIONS, GUARDS, guard_node_name

__all__ = ["to_brevitas_graph"]

_brevitas_node._side_effectful_functions.update(GUARDS.values())


def to_brevitas_graph(gm: torch.fx.GraphModule) -> Any:
    """Copy a ``torch.fx`` graph, node by node, into Brevitas' own ``GraphModule``,
    for Brevitas graph passes run without re-tracing (``trace_model=False``,
    ``quantize(graph)`` directly), which do not work on torch.fx graphs.

    Node names, ``node.meta``, guards and ``gm.specializations`` are kept (the
    records also survive ``copy.deepcopy`` of the result and of what Brevitas
    makes from it); ``specfx.explain`` works on the result. Like
    ``GraphModule(gm, graph)``, the result shares ``gm``'s submodules and
    parameters: pass a deep copy when Brevitas will change them, as its recipe
    does. A Brevitas graph is returned as it is.

    :raise TypeError: if ``gm`` is not a ``GraphModule``, or its graph packs its
        inputs or outputs with a pytree code generator (Brevitas' copy of torch.fx
        has its own pytree types).

    >>> import copy, torch, specfx
    >>> from specfx.brevitas import to_brevitas_graph
    >>> def f(x):
    ...     a, b = torch.chunk(x, 2)
    ...     return torch.cat([b, a])
    >>> gm = specfx.trace(f, torch.arange(4.0))
    >>> graph = to_brevitas_graph(copy.deepcopy(gm))
    >>> type(graph).__module__, graph(torch.arange(4.0)).tolist()
    ('brevitas.backport.fx.graph_module', [2.0, 3.0, 0.0, 1.0])
    >>> [s.guard_description for s in copy.deepcopy(graph).specializations]
    ['len(torch.chunk(x, 2)) == 2']
    """
    if isinstance(gm, BrevitasGraphModule):
        return gm
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"to_brevitas_graph() takes a torch.fx.GraphModule, not {type(gm).__name__}")
    # specfx's entry check on plain inputs/outputs copies as plain code (its kind checks are dropped)
    if type(gm.graph._codegen) is not torch.fx.graph.CodeGen and not is_plain(gm.graph._codegen):
        raise TypeError(
            "to_brevitas_graph() cannot copy a graph whose inputs or outputs are packed by "
            f"{type(gm.graph._codegen).__name__} (Brevitas' copy of torch.fx has its own pytree types); "
            "re-trace it with Brevitas instead: preprocess_for_quantize(gm) with its default trace_model=True, "
            "or quantize its layers in place with brevitas.graph.quantize.layerwise_quantize(gm), which takes "
            "the torch.fx graph as it is (the route for transformers models, whose graph quantize() cannot "
            "take: it puts an input quantizer on every input, integer ids and inputs left at None included)"
        )
    graph = BrevitasGraph()
    copies: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        # torch.fx's map_arg finds torch.fx nodes (Brevitas' finds only its own)
        args = torch.fx.node.map_arg(node.args, copies.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, copies.__getitem__)
        name = node.name
        if node.op == "call_function" and node.target in GUARD_FUNCTIONS and node.args:
            name = guard_node_name(node.args[0], node.target) or name  # as a re-trace names it
        if node.op == "call_function" and node.target is guarded:
            args = (args[0], *brevitas_checks(args[1:], lambda check: check))
        twin = graph.create_node(node.op, node.target, args, kwargs, name=name, type_expr=node.type)
        twin.meta = dict(node.meta)
        copies[node] = twin
    result = BrevitasGraphModule(gm, graph, type(gm).__name__)
    result.train(gm.training)
    for name in RECORDS:
        if hasattr(gm, name):
            setattr(result, name, getattr(gm, name))
    keep_records(result)
    return result
