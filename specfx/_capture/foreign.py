"""Modules the model does not own, called by its code.

``nn.CrossEntropyLoss()(logits, labels)`` or ``nn.Softmax(dim=-1)(scores)`` built inside
``forward``, a module-level ``gelu = ACT2FN["gelu"]``, a module kept in a plain list: torch.fx
names every module call by its path in the root and raises ``NameError: module is not
installed as a submodule`` for any other. With example inputs specfx installs such a module
under a generated name (``_specfx_module0``): on the root while the trace runs (the state
keeper removes it with the trace's other changes, so the user's model is left as it was),
hence on the GraphModule, which keeps it. The graph then calls the very object eager called,
with its parameters and buffers as they are at run time, and pickles with it.

A module *built while the trace runs* that holds parameters or buffers
(``nn.Linear(4, 3)(x)`` in forward) is refused: eager makes (and randomly initializes) new
weights at every call, and a graph that kept the trace's draw would silently differ.

>>> import torch, specfx
>>> class Classifier(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.head = torch.nn.Linear(4, 3)
...     def forward(self, x, labels):
...         logits = self.head(x)
...         return torch.nn.CrossEntropyLoss()(logits, labels), torch.nn.Softmax(dim=-1)(logits)
>>> model, x, labels = Classifier(), torch.randn(2, 4), torch.tensor([0, 2])
>>> gm = specfx.trace(model, (x, labels))
>>> [name for name, _ in gm.named_children()]
['head', '_specfx_module0', '_specfx_module1']
>>> [name for name, _ in model.named_children()]
['head']
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from . import patches as _patches
from .session import TraceSession
import sys
import types
from typing import Optional

from .._frames.source import SourceLocation, is_user_file
from .._policy import messages as _messages
from ..errors import SpecializationError

__all__ = ["ForeignModules", "PARAMETER_NEW", "model_code_location", "parameter_made_in_forward"]

# `nn.Parameter(data)` compares `type(data)`: a parameter made of a traced factory's result
# (`torch.empty(3, 2)` in a layer's __init__, run inside forward) is refused there.
PARAMETER_NEW = torch.nn.Parameter.__new__.__code__

_PREFIX = "_specfx_module"


class ForeignModules:
    """Names (by installing them) the modules a trace calls that its root does not own."""

    def __init__(self, tracer: TraceSession) -> None:
        self._tracer = tracer
        self._made: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # got state while the trace ran
        self._names: "weakref.WeakKeyDictionary[torch.nn.Module, str]" = weakref.WeakKeyDictionary()

    def watch(self) -> None:
        """Inside the trace's patch session: note the modules that register a parameter or
        buffer while model code runs (the modules forward builds), and make
        ``torch.func.functional_call`` on traced values one graph call."""
        for method in ("register_parameter", "register_buffer"):
            _patches.patch(torch.nn.Module, method, self._noting(method))
        # (caught however it is held: `from torch.func import functional_call` binds it early)
        functions: Any = (torch.func.functional_call, torch.nn.utils.stateless.functional_call)
        for function in functions:
            _patches.patch_calls(function, self._functional_call(function))

    def _functional_call(self, target: Any) -> Any:
        """``torch.func.functional_call(module, tensors, args)`` with traced values: one graph call
        of it, on the module by its name in the graph (eager swaps the module's tensors for the
        given ones, runs it, and puts them back: the graph does the same on the run-time tensors)."""
        tracer = self._tracer

        def functional_call(original: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
            if not tracer.records_factories() or not isinstance(module, torch.nn.Module) or not any(
                    isinstance(a, torch.fx.Proxy) for a in torch.utils._pytree.tree_leaves((args, kwargs))):
                return original(module, *args, **kwargs)
            path = next((name for name, m in tracer.root.named_modules() if m is module), None)
            module_proxy = tracer.create_proxy("get_attr", path if path else self.name(module), (), {})
            if args and isinstance(args[0], dict):  # (a node's dict arguments are immutable: functional_call
                args = (tracer.create_proxy("call_function", dict, (args[0],), {}), *args[1:])  # writes to it)
            return tracer.create_proxy("call_function", target, (module_proxy, *args), kwargs)

        functional_call.__name__ = "functional_call"
        return functional_call

    def _noting(self, method: str) -> Any:
        made, tracer = self._made, self._tracer

        def register(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if tracer.records_factories():
                made.add(module)
            return _patches.previous(torch.nn.Module, method)(module, *args, **kwargs)

        register.__name__ = method
        return register

    def name(self, module: torch.nn.Module) -> str:
        """The generated name of ``module`` on the root (installing it the first time)."""
        name = self._names.get(module)
        if name is not None:
            return name
        made = [m for m in module.modules() if m in self._made and _holds_tensors(m)]
        if made:
            self._tracer.refuse(SpecializationError(
                _messages.module_made_in_forward(type(module).__name__, type(made[0]).__name__, model_code_location()),
                operation=f"{type(module).__name__}(...)"))
        name = self._tracer.get_fresh_qualname(_PREFIX)
        # (the root's table, not setattr: torch.fx patches Module.__getattr__/__setattr__ while
        # it traces; the state keeper restores the root's tables by identity after the trace)
        self._tracer.root._modules[name] = module
        self._names[module] = name
        self._tracer.forget_state_names()
        return name


def _holds_tensors(module: torch.nn.Module) -> bool:
    # (CrossEntropyLoss registers its optional `weight` buffer as None)
    return any(t is not None for t in (*module._parameters.values(), *module._buffers.values()))


def model_code_location() -> Optional[SourceLocation]:
    """The innermost frame of model code (not specfx, not torch): the line in forward that
    builds the layer, not the layer's __init__ in torch."""
    frame: Optional[types.FrameType] = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno,
                          getattr(frame.f_code, "co_qualname", frame.f_code.co_name), frame.f_lasti)


def parameter_made_in_forward() -> SpecializationError:
    """The refusal for ``nn.Parameter(...)`` made of a traced value (a layer built in forward)."""
    location = model_code_location()
    return SpecializationError(_messages.parameter_made_in_forward(location), operation="torch.nn.Parameter(...)",
                               location=str(location) if location else None)
