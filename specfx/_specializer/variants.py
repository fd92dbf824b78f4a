"""One traced variant of a :class:`~specfx.Specializer`: its prologue, whether a
failed attempt may leave effects behind (both from ``_trace/guard_runs.py``), and
how the variant reads the model's current state.

Every ``get_attr``/``call_module`` that names the model's state is read through the
live model (``self._specfx_model.<name>``), so variants see
``load_state_dict(assign=True)``, reassigned buffers and parametrizations.
"""

from __future__ import annotations

import operator
from typing import Any, Hashable

import torch
import torch.fx

from .._trace.guard_runs import LIVE_MODEL, build_prologue, late_and_early_guards, saved_paths, writes_before

__all__ = ["Variant", "read_live_state"]


def read_live_state(gm: torch.fx.GraphModule, model: Any) -> None:
    """Make ``gm`` read the model's parameters, buffers and submodules through the
    model itself at call time (not the tensors it held when traced)."""
    if not isinstance(model, torch.nn.Module):
        return
    changed = False
    for node in gm.graph.nodes:
        if node.op in ("get_attr", "call_module") and isinstance(node.target, str):
            try:
                operator.attrgetter(node.target)(model)
            except AttributeError:
                continue  # a constant torch.fx stored on the graph module itself
            node.target = f"{LIVE_MODEL}.{node.target}"
            changed = True
    if changed:
        # Unused submodules are dropped before the model joins: the sweep would otherwise
        # delete the submodules this variant does not call from the user's model itself.
        gm.delete_all_unused_submodules()
        gm._modules[LIVE_MODEL] = model
        gm.recompile()


class Variant:
    """A traced graph with its prologue and what selecting it needs: ``writes``, what
    a failed attempt may leave behind (checkpointed when not empty), and
    ``check_first``, whether the prologue must run even when it is the only variant
    (the graph writes before a guard the prologue checks)."""

    __slots__ = ("graph", "prologue", "key", "inputs", "run", "check", "writes", "saved_paths", "check_first")

    def __init__(self, graph: torch.fx.GraphModule, key: Hashable, inputs: str, model: Any) -> None:
        read_live_state(graph, model)
        setattr(graph, "served_batches", ())  # noqa: B010  (Specializer.fit fills it in)
        self.graph = graph
        self.prologue = build_prologue(graph)
        self.key = key
        self.inputs = inputs
        late, early = late_and_early_guards(graph, self.prologue)
        self.writes = writes_before(graph, late)
        self.saved_paths = saved_paths(self.writes, graph)
        self.check_first = bool(early) and bool(writes_before(graph, early))
        # The generated functions themselves: the variants carry no hooks, so skipping
        # nn.Module.__call__ saves microseconds on every call.
        self.run = graph.forward
        self.check = self.prologue.forward if self.prologue is not None else None
