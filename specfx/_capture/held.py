"""Tensors the model holds as plain attributes are read by the graph, at run time.

``self.total = torch.zeros(2)`` (not a parameter, not a buffer) is stored in the module's
``__dict__``, so reading it calls no hook: torch.fx's ``Module.__getattr__`` patch sees only
parameters, buffers and submodules. An op whose tensors are all such attributes (or
Python values) then runs on real tensors while the trace goes on, and its result becomes a
constant of the graph: ``self.total * 1`` keeps the trace-time value, though the model
writes ``self.total`` in forward (``self.total.add_(x)``) or its owner changes it between
calls, and eager reads it live.

While specfx traces with example inputs a model that holds such tensors, a torch function
mode (per thread) sees every torch call of the traced code; a call that takes one of those
tensors takes a ``get_attr`` proxy of it instead, so the op becomes a node that reads the
attribute when the graph runs, as it does for buffers. Models without such attributes
pay nothing (the mode is not entered).
"""

from __future__ import annotations

import contextlib
import itertools
import types
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from .evaluation import is_torch_module
from .state import module_tree, tensors_in
from .values import ValueProxy
from .session import TraceSession


__all__ = ["held_tensors", "reading_held_tensors"]


def held_tensors(root: Any, holders: Optional[Sequence[Tuple[str, torch.nn.Module]]] = None
                 ) -> Dict[int, Tuple[torch.Tensor, Optional[str]]]:
    """The tensors ``root``'s modules hold as plain attributes, or inside lists, tuples and
    dicts held so (two levels deep): id -> (the tensor, kept so that its id stays its own
    while forward runs; its qualified name, None inside a container, which ``get_attr``
    cannot name: such a tensor is read through a constant attribute that is the same
    tensor object). ``holders``: (qualified name, module) of the modules that may hold any,
    when known (``StateKeeper.attribute_holders``); by default every module.

    A parameter counts too where a user's module keeps it in a container (an alias,
    `self.held = [self.lin.weight]`, written through `.data` around torch.fx's attribute
    hook); torch's own modules keep theirs for their own code (an RNN's `_flat_weights`)."""
    if not isinstance(root, torch.nn.Module):
        return {}
    held: Dict[int, Tuple[torch.Tensor, Optional[str]]] = {}
    if holders is None:
        holders = module_tree(root)
    for prefix, module in holders:
        attributes = module.__dict__
        kinds = _TENSOR_ONLY if is_torch_module(module) else _HELD_TYPES
        # (nn.Module's own entries: its tables of parameters, buffers and submodules, read
        # through torch.fx's getattr hook, its hooks and flags; skipped in C)
        for key in itertools.filterfalse(_MODULE_ENTRIES.__contains__, attributes):
            value = attributes[key]
            if type(value) in kinds:
                held.setdefault(id(value), (value, f"{prefix}.{key}" if prefix else key))
            else:
                for tensor in tensors_in(value, 2, kinds):
                    held.setdefault(id(tensor), (tensor, None))
    return held


# (a parameter in a list is the model's own, read around the attribute hook: `self.held[0].data.add_(1)`)
_HELD_TYPES = (torch.Tensor, torch.nn.Parameter)
_TENSOR_ONLY = (torch.Tensor,)
_MODULE_ENTRIES = frozenset(torch.nn.Module().__dict__)


_GETSET = types.GetSetDescriptorType  # a tensor attribute's getter reaches a mode as its __get__


class _HeldTensorReads(TorchFunctionMode):
    """Torch calls of the traced code that take a held tensor take its ``get_attr`` proxy."""

    def __init__(self, tracer: TraceSession, held: Dict[int, Tuple[torch.Tensor, Optional[str]]]) -> None:
        super().__init__()
        self._tracer = tracer
        self._held = held
        self._proxies: Dict[str, Any] = {}

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        descriptor = getattr(func, "__self__", None)
        if (type(descriptor) is _GETSET and getattr(func, "__name__", None) == "__get__" and args
                and self._tracer.records_factories()):
            # an attribute of a held tensor (`.data`, `.shape`): read from its proxy, as for any traced value
            owner = self._read(args[0])
            if owner is not args[0]:
                return getattr(owner, descriptor.__name__)
        if self._tracer.records_factories() and any(
                type(leaf) in _HELD_TYPES and id(leaf) in self._held for leaf in tree_flatten((args, kwargs))[0]):
            args, kwargs = tree_map(self._read, (args, kwargs))
            # the proxy records the call as for any op on a traced value (func may be an
            # unbound Tensor method, which a proxy cannot be passed to directly)
            return ValueProxy.__torch_function__(func, types, args, kwargs)
        return func(*args, **kwargs)

    def _read(self, value: Any) -> Any:
        if type(value) not in _HELD_TYPES or id(value) not in self._held:
            return value
        name = self._held[id(value)][1]
        if name is None:  # inside a container: the model's parameter or buffer it is, else a
            # constant attribute that is this tensor object
            name = self._tracer.state_name(value) or self._tracer.tensor_attrs.get(value) or self._constant(value)
            self._held[id(value)] = (value, name)
        proxy = self._proxies.get(name)
        if proxy is None:
            proxy = self._proxies[name] = self._tracer.create_proxy("get_attr", name, (), {})
        return proxy

    def _constant(self, value: torch.Tensor) -> str:
        # as torch.fx names a tensor constant (the attribute is removed from the user's model
        # with the rest of the trace's changes; the graph module keeps it)
        name = self._tracer.get_fresh_qualname("_tensor_constant")
        setattr(self._tracer.root, name, value)
        self._tracer.tensor_attrs[value] = name
        return name


@contextlib.contextmanager
def reading_held_tensors(tracer: TraceSession, root: Any) -> Iterator[None]:
    """While tracing ``root`` with example inputs, ops on its plain tensor attributes are nodes."""
    held = held_tensors(root, tracer.attribute_holders) if tracer.examples is not None else {}
    if not held:
        yield
        return
    with _HeldTensorReads(tracer, held):
        yield
