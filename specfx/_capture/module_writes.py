"""What ``forward`` does to the model's own state: the graph repeats it, or the trace refuses.

Writes to the model's tensors in place (``self.steps += 1`` on a buffer, BatchNorm's
statistics, ``self.avg.mul_(0.9)``) are graph nodes already. What is left is what
``forward`` binds on a module, which the trace sees as a change to the module's tables
(``StateKeeper.table_changes``) once it has put the model back:

- a traced tensor bound to an attribute or an existing buffer (``self.avg = 0.9 *
  self.avg + m``, ``self.last = x``): the graph binds the same tensor at the same path on
  every call (:func:`specfx._graph.module_state.assign_attribute`, before the graph
  returns, where eager's ``forward`` has bound it), so the graph module after each call holds what the eager model holds;
- anything else (a Python value such as an ``int`` counter or a flag, a new parameter,
  buffer or submodule, the model's lists and dicts changed, a parameter's
  ``requires_grad`` or ``.grad`` set): no graph can repeat it, so the trace is refused,
  naming the attributes and the line of ``forward`` that writes them.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Iterable, List, Optional, Sequence, Set

import torch
import torch.fx

from .._frames.bytecode import attribute_read_line, store_line
from .._frames.source import SourceLocation
from .._graph.module_state import SELF, assign_attribute
from .._policy.messages import model_state_changes
from ..errors import SpecializationError
from .evaluation import is_torch_module
from .state import ABSENT, TableChange
from .values import MISSING, value_of

__all__ = ["repeat_module_writes"]

# the attributes torch.fx and specfx add to the root while tracing (constants, foreign modules)
_GENERATED = ("_tensor_constant", "_torchbind_obj", "_specfx_")
# flags of libraries' lazy set-ups that their code redoes when the flag is absent: transformers
# installs its output-collecting hooks on the first call asking for hidden states and marks
# the model; the trace takes the hooks off again with the flag (StateKeeper's hook tables)
_LAZY_SETUP_FLAGS = frozenset({"_output_capturing_hooks_installed"})


def repeat_module_writes(gm: torch.fx.GraphModule, root: Any, changes: Sequence[TableChange],
                         changed: Sequence[str]) -> None:
    """Record on ``gm`` a node per traced tensor ``forward`` bound on the model, or raise
    :class:`SpecializationError` for a change no graph repeats (``changed``: the Python
    objects and parameter flags the trace put back)."""
    read = {node.target for node in gm.graph.nodes if node.op in ("get_attr", "call_module")}
    rebound: List[TableChange] = []
    refused: List[str] = []
    for change in changes:
        if change.before is ABSENT and (change.path in read or change.key.startswith(_GENERATED)):
            continue  # a constant or module torch.fx or specfx keeps on the root (`_tensor_constant0`)
        if _same_value(change.before, change.after):
            continue  # (`self.errors = (KeyError,)` again: the state after forward is the one before)
        if change.table == "attributes" and change.key.startswith("_") and _torch_module(root, change.module):
            continue  # torch's own caches (an RNN's `_flat_weights`), which its code rebuilds as it needs
        if change.table == "attributes" and change.before is ABSENT and change.key in _LAZY_SETUP_FLAGS:
            continue  # (transformers' hooks went with the flag: the next call that asks installs both)
        reason = _why_not_repeated(change)
        if reason is None:
            rebound.append(change)
        else:
            refused.append(f"{change.path} {reason}")
    refused += [f"{name} (changed in place)" for name in changed]
    if refused:
        names = {c.key for c in changes} | {name.rpartition(".")[2].split("[")[0] for name in changed}
        location = _line_writing(root, names)
        raise SpecializationError(model_state_changes(refused, location), operation="a change to the model",
                                  location=str(location) if location else None)
    for change in rebound:
        _record_rebinding(gm, root, change)
    if rebound:
        gm.recompile()


def _why_not_repeated(change: TableChange) -> Optional[str]:
    """None when the graph can repeat ``change``, else what it is, in the user's terms."""
    if change.after is ABSENT:
        return "(deleted)"
    if change.table == "modules":
        return "(a submodule bound)" if change.before is ABSENT else "(a submodule replaced)"
    if change.table == "parameters":
        return "(a parameter registered)" if change.before is ABSENT else "(a parameter replaced)"
    if change.table == "buffers" and change.before is ABSENT:
        return "(a buffer registered in forward)"
    if not isinstance(change.after, torch.fx.Proxy):
        if isinstance(change.after, torch.Tensor):
            return "(bound to a tensor made from no traced value)"
        return f"(bound to {_kind(change.after)})"
    value = _traced_value(change.after)
    if value is not MISSING and not isinstance(value, torch.Tensor):
        return f"(bound to a traced {type(value).__name__})"
    return None


_IMMUTABLE = (int, float, bool, str, bytes, complex, tuple, frozenset, type(None), torch.dtype, torch.device)


def _same_value(before: Any, after: Any) -> bool:
    """Whether an attribute forward rebound holds an equal immutable Python value again."""
    if type(before) is not type(after) or not isinstance(before, _IMMUTABLE):
        return False
    try:
        return bool(before == after)
    except Exception:  # (a tuple holding tensors or proxies)
        return False


def _torch_module(root: Any, path: str) -> bool:
    """Whether the module at ``path`` of ``root`` is one of torch's own classes."""
    try:
        module = root.get_submodule(path) if path else root
    except AttributeError:
        return False
    return is_torch_module(module)


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _traced_value(proxy: torch.fx.Proxy) -> Any:
    try:
        return value_of(proxy)
    except (AttributeError, KeyError):  # a proxy of torch.fx's own (no value)
        return MISSING


def _record_rebinding(gm: torch.fx.GraphModule, root: Any, change: TableChange) -> None:
    """``assign_attribute(self, path, value)`` before the graph's output, and the graph
    module made to hold what the model held before the trace at that path (so a call
    reads, and ``gm`` shows, eager's state)."""
    node = change.after.node
    graph = gm.graph
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    _refuse_if_read_later(graph, node, change)
    with graph.inserting_before(output):
        graph.call_function(assign_attribute, (SELF, change.path, node))
    owner = _owner_in(gm, change.module)
    if change.before is not ABSENT and change.key not in owner.__dict__ and change.key not in owner._buffers:
        if change.table == "buffers":
            owner.register_buffer(change.key, change.before)
        else:
            setattr(owner, change.key, change.before)


def _owner_in(gm: torch.fx.GraphModule, path: str) -> torch.nn.Module:
    """The module of ``gm`` at ``path``, made as an empty module where the graph has none
    (as torch.fx makes the modules on the way to an attribute it reads)."""
    owner: torch.nn.Module = gm
    for part in filter(None, path.split(".")):
        child = owner._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            owner.add_module(part, child)
        owner = child
    return owner


def _refuse_if_read_later(graph: torch.fx.Graph, node: torch.fx.Node, change: TableChange) -> None:
    """A submodule the graph calls as a leaf after ``node`` may read the attribute, which
    the graph binds only at the end: refuse rather than let it read the old tensor."""
    prefix = change.module
    seen = False
    for later in graph.nodes:
        seen = seen or later is node
        # (only the owner, or a leaf holding it, can read its attributes)
        if seen and later.op == "call_module" and prefix and (
                later.target == prefix or prefix.startswith(later.target + ".")):
            raise SpecializationError(
                model_state_changes([f"{change.path} (bound, then read by the leaf module `{later.target}`)"],
                                    None), operation="a change to the model")


def _line_writing(root: Any, names: Set[str]) -> Optional[SourceLocation]:
    """The line of a method of the model's classes (``forward`` first) that stores one of
    the attribute ``names`` (or, failing that, reads one: ``self.history.append``,
    ``self.register_buffer``)."""
    if not isinstance(root, torch.nn.Module):
        return None
    attributes = frozenset(names)
    methods = frozenset({"register_buffer", "register_parameter", "add_module", "register_module",
                         *(("train", "eval", "requires_grad_") if "training" in names or "requires_grad" in names else ())})
    finders: List[Callable[[types.CodeType], Optional[int]]] = [
        lambda code: store_line(code, frozenset(), False, attributes),
        lambda code: attribute_read_line(code, methods),
        lambda code: attribute_read_line(code, attributes)]
    for finder in finders:
        for code in _method_codes(root):
            line = finder(code)
            if line is not None:
                return SourceLocation(code.co_filename, line, getattr(code, "co_qualname", code.co_name))
    return None


def _method_codes(root: torch.nn.Module) -> Iterable[types.CodeType]:
    """The code of the methods of the model's own classes, each class's ``forward`` first
    (``__init__`` makes the attributes; forward changes them)."""
    seen: Set[type] = set()
    for module in root.modules():
        kind = type(module)
        if kind in seen or kind.__module__.startswith("torch."):
            continue
        seen.add(kind)
        methods = sorted((f for k, f in vars(kind).items() if k != "__init__"),
                         key=lambda f: getattr(f, "__name__", "") != "forward")
        for function in methods:
            code = getattr(getattr(function, "__func__", function), "__code__", None)
            if isinstance(code, types.CodeType):
                yield code
