"""The graph passes of deployment tools that would delete specfx's guards if nothing used them,
written from their documented behaviour (the real tools run in .ci/run's clients stage):

- :func:`keep_used_nodes`: Sony MCT's view of a model. MCT traces it with ``torch.fx`` and keeps
  only the nodes an output depends on: re-traced with ``symbolic_trace``, every node without
  users deleted (repeatedly), side-effect registrations ignored.
- :func:`remove_graph_asserts`: ExecuTorch's ``RemoveGraphAssertsPass``, which
  ``to_executorch()`` always runs (``executorch/exir/passes/remove_graph_asserts_pass.py``): it
  erases ``aten._assert_async.msg``, ``aten._assert_scalar``, ``aten.sym_constrain_range`` (and
  ``_for_size``) and ``aten._assert_tensor_metadata`` from every graph module, then eliminates
  dead code. When executorch is installed, its own pass runs.

>>> import torch, specfx
>>> gm = specfx.trace(lambda x: x * 2 if x.sum() > 0 else -x, torch.ones(2), policy="bool")
>>> any(n.target is specfx.guard_truth for n in keep_used_nodes(gm).graph.nodes)
True
"""

from __future__ import annotations

import torch
import torch.fx

__all__ = ["ASSERTS", "keep_used_nodes", "remove_graph_asserts"]

ASSERTS = (
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten._assert_tensor_metadata.default,
)


def keep_used_nodes(gm: torch.nn.Module) -> torch.fx.GraphModule:
    """A re-trace of ``gm`` with every node no output depends on deleted."""
    retraced = torch.fx.symbolic_trace(gm)
    graph = retraced.graph
    changed = True
    while changed:
        changed = False
        for node in reversed(list(graph.nodes)):
            if node.op not in ("placeholder", "output") and not node.users:
                graph.erase_node(node)
                changed = True
    retraced.recompile()
    return retraced


def remove_graph_asserts(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` (changed in place) without its assertion ops, then without dead code."""
    try:
        from executorch.exir.passes.remove_graph_asserts_pass import RemoveGraphAssertsPass
    except ImportError:
        for module in gm.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in list(module.graph.nodes):
                    if node.op == "call_function" and node.target in ASSERTS:
                        module.graph.erase_node(node)
                module.recompile()
                module.graph.eliminate_dead_code()
    else:
        RemoveGraphAssertsPass()(gm)
    gm.recompile()
    return gm
