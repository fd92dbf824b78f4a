"""The graph's entry check that the model is still the one traced, and the mode it was traced in.

A traced graph holds the tensors and leaf modules it read from the model, and has inlined
what the modules it traced through did, their hooks and the process-wide module hooks
included. So it does not follow the model when a parameter, buffer or tensor attribute is
*replaced* on it (``model.block.scale = nn.Parameter(...)``, ``load_state_dict(...,
assign=True)``), when a submodule is swapped, or when a hook is added to or removed from a
module it traced through (or a process-wide one registered or removed): the rule is that
the graph raises :class:`GuardError` at entry, naming what changed, instead of computing
with what it held. (Writes *into* those tensors, the optimizer's steps, need no check: the
graph reads the same tensors.) A leaf module the graph calls is the model's own object, so
its parameters and hooks are followed as eager follows them, and are not checked.

The graph module's ``training`` flag is checked too when the code traced through reads
``self.training``: the trace baked that mode in, so ``gm.train()`` after an eval-mode trace
(or ``gm.eval()`` after a train-mode one) raises instead of running the other mode's graph.

The mode is a constant of the node (``specfx_check_model(self, x, False, 'file:line: ...')``),
so every copy, pickle and re-trace keeps it. What the model check compares is kept in a
:class:`ModelWatch` on the graph module (``_specfx_model_watch``), holding the model weakly;
``specfx.trace(gm)`` carries it to the new graph. A deepcopy or a pickle of the graph holds
tensors of its own, which no longer are the model's, and so does not keep it; nor does a
graph another tracer makes from this one (``symbolic_trace(gm)``, FX quantization), which
keeps the call and so the mode check. Cost per call: a few C-level passes over the watched
tables.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.modules.module as _module_hooks
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy

from .._policy.messages import mode_changed, model_changed
from ..errors import GuardError
from ..guards import _is_foreign_proxy
from .module_state import SELF

__all__ = ["ATTRIBUTE", "GLOBAL_HOOKS", "HOOK_TABLES", "ModelWatch", "check_model"]

ATTRIBUTE = "_specfx_model_watch"  # where a graph module keeps its ModelWatch

# The tables of a module whose entries a call runs (its forward hooks and pre-hooks; the
# backward hooks torch attaches to its outputs)
HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks",
               "_forward_hooks_always_called", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs")
# The process-wide hooks nn.Module.__call__ runs around every module's forward
GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                "_global_backward_hooks", "_global_forward_hooks_always_called")


def global_hooks() -> List[Any]:
    """The keys of every process-wide module hook table (handles' ids, never reused)."""
    return [tuple(getattr(_module_hooks, name, {})) for name in GLOBAL_HOOKS]


class ModelWatch:
    """What the graph checks at entry about the model: its tensors and submodules on the
    paths the graph reads (by identity), the hook tables of the modules it traced through,
    and the process-wide hooks. (Slots: no ``__dict__`` through which a trace of the graph
    would take the model's tensors it holds for the graph's own.)"""

    __slots__ = ("_root", "_tables", "_keys", "_objects", "_paths", "_hook_names", "_hook_tables", "_hooks",
                 "_global_hooks")

    def __init__(self, root: torch.nn.Module, paths: Sequence[str], traced_through: Sequence[str]) -> None:
        self._root = weakref.ref(root)
        # (table, key, object, the path as the user writes it): every step of every path
        steps: Dict[Tuple[int, str], Tuple[Any, str, Any, str]] = {}
        for path in paths:
            module: Any = root
            parts = path.split(".")
            for depth, part in enumerate(parts):
                table = _table_holding(module, part)
                if table is None:
                    break
                value = table[part]
                steps.setdefault((id(table), part), (table, part, value, ".".join(parts[:depth + 1])))
                module = value
        self._tables = [t for t, _, _, _ in steps.values()]
        self._keys = [k for _, k, _, _ in steps.values()]
        self._objects = [o for _, _, o, _ in steps.values()]
        self._paths = [p for _, _, _, p in steps.values()]
        modules = [(name, root.get_submodule(name)) for name in traced_through]
        self._hook_names = [(name, table) for name, _ in modules for table in HOOK_TABLES]
        self._hook_tables = [getattr(m, table, {}) for _, m in modules for table in HOOK_TABLES]
        self._hooks = [tuple(t) for t in self._hook_tables]
        self._global_hooks = global_hooks()

    # A copy of the graph holds tensors of its own (no longer the model's): it watches nothing,
    # and a pickle names no private path.
    def __deepcopy__(self, memo: Any) -> Dict[str, Any]:
        return {}

    def __reduce__(self) -> Any:
        return (dict, ())

    def check(self) -> None:
        """Raise :class:`GuardError` if the model changed since the trace."""
        root = self._root()
        if root is None:  # the model is gone: nothing to compare with
            return
        if not all(map(operator.is_, map(_lookup, self._tables, self._keys), self._objects)):
            raise GuardError(model_changed(self._what_changed()))
        if list(map(tuple, self._hook_tables)) != self._hooks or global_hooks() != self._global_hooks:
            raise GuardError(model_changed(self._what_changed()))

    def _what_changed(self) -> List[str]:
        changed = []
        for table, key, value, path in zip(self._tables, self._keys, self._objects, self._paths):
            now = _lookup(table, key)
            if now is not value:
                changed.append(f"`{path}` is {_kind(now)} other than the traced one" if now is not None
                               else f"`{path}` was removed")
        for (name, table_name), table, keys in zip(self._hook_names, self._hook_tables, self._hooks):
            if tuple(table) != keys:
                changed.append(f"{_hook_kind(table_name)} {'added to' if len(table) > len(keys) else 'removed from'} "
                               f"`{name or 'the model'}`")
        for table_name, keys, now in zip(GLOBAL_HOOKS, self._global_hooks, global_hooks()):
            if now != keys:
                changed.append(f"a process-wide {_hook_kind('_' + table_name[8:]).partition(' ')[2]} "
                               f"{'registered' if len(now) > len(keys) else 'removed'}")
        return changed


def _lookup(table: Any, key: str) -> Any:
    try:
        return table[key]
    except KeyError:
        return None


def _table_holding(module: Any, name: str) -> Optional[Any]:
    """The table of ``module`` that holds ``name`` (its parameters, buffers, submodules, or
    its own attributes), as ``getattr`` would find it."""
    state = getattr(module, "__dict__", None)
    if not isinstance(state, dict):
        return None
    for table_name in ("_parameters", "_buffers", "_modules"):
        table = state.get(table_name)
        if table is not None and name in table:
            return table
    return state if name in state else None


def _kind(value: Any) -> str:
    if isinstance(value, torch.nn.Parameter):
        return "a parameter"
    if isinstance(value, torch.Tensor):
        return "a tensor"
    if isinstance(value, torch.nn.Module):
        return f"a module ({type(value).__name__})"
    return f"a {type(value).__name__}"


def _hook_kind(table_name: str) -> str:
    return {"_forward_pre_hooks": "a forward pre-hook", "_forward_hooks": "a forward hook",
            "_backward_pre_hooks": "a backward pre-hook", "_backward_hooks": "a backward hook",
            "_forward_hooks_always_called": "a forward hook (always_call)",
            "_forward_hooks_with_kwargs": "a forward hook (with_kwargs)",
            "_forward_pre_hooks_with_kwargs": "a forward pre-hook (with_kwargs)"}.get(table_name, "a hook")


def check_model(module: Any, first: Any = None, training: Optional[bool] = None, where: str = "") -> None:
    """The graph's entry check (see the module's docstring); called by generated code with
    ``self``, its first input (through which a re-trace records the call again), and the mode
    to check (``None``: the traced code does not read ``self.training``) with the line that
    reads it."""
    if isinstance(first, Proxy) or _is_foreign_proxy(first):
        first.tracer.create_proxy("call_function", check_model, (SELF, first, training, where), {})
        return None
    if torch.compiler.is_compiling() or not isinstance(module, torch.nn.Module):
        return None  # (torch.compile / export guard the module themselves; an Interpreter has none)
    if training is not None and module.training != training:
        raise GuardError(mode_changed(training, where), expression="self.training", expected=training,
                         actual=module.training, location=where or None)
    watch = module.__dict__.get(ATTRIBUTE)
    if type(watch) is ModelWatch:
        watch.check()
    return None


check_model.__module__ = "specfx"  # generated code imports it from the package
has_side_effect(check_model)
