"""What a graph checks about the model at entry, set up after the trace; and the module
machinery a trace must refuse before it starts.

After the trace, :func:`watch_model` gives the graph a first node,
``specfx_check_model(self, x, training, where)`` (``_graph/model_watch.py``), and the graph
module a ``ModelWatch``: the
model's tensors and submodules on every path the graph reads, the hook tables of the modules
it traced through (read from the nodes' ``nn_module_stack``), the process-wide hooks, and the
mode when the traced code reads ``self.training``.

Before the trace, :func:`refuse_module_machinery` refuses what a graph cannot stand in for:
uninitialized lazy modules (the trace would draw the user's weights), a root that overrides
``__call__`` (torch.fx traces ``forward`` alone), and process-wide forward hooks (eager runs
them around the model itself; a graph module would hand them itself).
"""

from __future__ import annotations

import types
from typing import Any, Callable, List, Optional, Set

import torch
import torch.fx
import torch.nn.modules.module as _module_hooks

from .._frames.bytecode import attribute_read_line
from .._frames.source import SourceLocation
from .._graph.model_watch import ATTRIBUTE, ModelWatch, check_model
from .._graph.module_state import SELF, assign_attribute
from .._policy.messages import call_overridden, global_module_hooks, lazy_modules
from ..errors import SpecializationError

__all__ = ["refuse_module_machinery", "watch_model"]


def refuse_module_machinery(root: Any, refuse: Callable[[SpecializationError], Any]) -> None:
    """Raise (through ``refuse``) for a model whose eager call a graph cannot reproduce."""
    if not isinstance(root, torch.nn.Module) or isinstance(root, torch.fx.GraphModule):
        return
    lazy = [name or type(root).__name__ for name, module in root.named_modules()
            if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in module._parameters.values())
            or any(isinstance(b, torch.nn.parameter.UninitializedBuffer) for b in module._buffers.values())]
    if lazy:
        refuse(SpecializationError(lazy_modules(lazy), operation="a lazy module"))
    overriding = _overridden_call(type(root))
    if overriding is not None:
        refuse(SpecializationError(call_overridden(type(root).__name__, overriding),
                                   operation="__call__", location=str(overriding) if overriding else None))
    registered = [name for name in ("_global_forward_pre_hooks", "_global_forward_hooks",
                                    "_global_forward_hooks_always_called")
                  if getattr(_module_hooks, name, None)]
    if registered:
        refuse(SpecializationError(global_module_hooks(), operation="process-wide module hooks"))


def _overridden_call(kind: type) -> Optional[SourceLocation]:
    """Where a class of the user's overrides ``nn.Module.__call__`` (None if none does)."""
    for cls in kind.__mro__:
        if cls is torch.nn.Module:
            return None
        call = vars(cls).get("__call__")
        # (a GraphModule's, of torch.fx or another FX copy such as Brevitas': it runs forward)
        if call is not None and not cls.__module__.startswith("torch.") and getattr(call, "__name__", "") != "call_wrapped":
            code = getattr(call, "__code__", None)
            if isinstance(code, types.CodeType):
                return SourceLocation(code.co_filename, code.co_firstlineno, code.co_qualname
                                      if hasattr(code, "co_qualname") else code.co_name)
            return SourceLocation("<unknown>", 0, f"{cls.__name__}.__call__")
    return None


def watch_model(gm: torch.fx.GraphModule, root: Any) -> None:
    """Give ``gm`` its entry check on ``root`` (a module traced with examples)."""
    if isinstance(root, torch.fx.GraphModule):  # re-traced: the node is recorded again; the model it watches
        watch = root.__dict__.get(ATTRIBUTE)
        if isinstance(watch, ModelWatch):
            setattr(gm, ATTRIBUTE, watch)
        return
    if not isinstance(root, torch.nn.Module):
        return
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return  # (no input to record the check through when re-traced)
    leaves = {n.target for n in graph.nodes if n.op == "call_module"}
    # (an attribute the graph binds itself on every call, `self.avg = ...`, is the graph's own)
    rebound = {n.args[1] for n in graph.nodes if n.op == "call_function" and n.target is assign_attribute}
    paths = [n.target for n in graph.nodes if n.op in ("get_attr", "call_module") and n.target not in rebound
             and _on_model(root, n.target)]
    entered: Set[str] = {""}
    for node in graph.nodes:
        entered.update(k for k in (node.meta.get("nn_module_stack") or {}) if k not in leaves)
    traced_through = [name for name in sorted(entered) if _on_model(root, name)]
    where = _reads_training(root, traced_through)
    setattr(gm, ATTRIBUTE, ModelWatch(root, paths, traced_through))
    mode = (root.training, where.describe()) if where is not None else (None, "")
    with graph.inserting_after(placeholders[-1]):
        graph.call_function(check_model, (SELF, placeholders[0], *mode))
    gm.recompile()


def _on_model(root: torch.nn.Module, path: str) -> bool:
    """Whether ``path`` names something of the model (not a constant torch.fx or specfx added)."""
    module: Any = root
    for part in filter(None, path.split(".")):
        if part.startswith(("_specfx", "_tensor_constant")):
            return False
        state = getattr(module, "__dict__", {})
        found = next((t[part] for t in (state.get("_parameters"), state.get("_buffers"), state.get("_modules"))
                      if t is not None and part in t), state.get(part))
        if found is None:
            return False
        module = found
    return True


def _reads_training(root: torch.nn.Module, traced_through: List[str]) -> Optional[SourceLocation]:
    """A line of the code of a module the trace went through that reads ``training``."""
    seen: Set[type] = set()
    names = frozenset({"training"})
    for name in traced_through:
        kind = type(root.get_submodule(name))
        for cls in kind.__mro__:
            if cls in seen or cls is torch.nn.Module or cls is object:
                continue
            seen.add(cls)
            for function in vars(cls).values():
                code = getattr(getattr(function, "__func__", function), "__code__", None)
                if isinstance(code, types.CodeType):
                    line = attribute_read_line(code, names)
                    if line is not None:
                        return SourceLocation(code.co_filename, line, getattr(code, "co_qualname", code.co_name))
    return None
