"""Tracing through ``@torch.jit.script`` functions that model code calls.

A proxy cannot enter a ``torch.jit.ScriptFunction`` (TorchScript checks its
argument types in C++), and torch.fx's ``autowrap_functions=`` on one records
a call of the ``ScriptFunction`` class and leaves an entry in torch.fx's
process-wide wrap table. ``torch.jit.script`` keeps the Python function it
compiled (``_torchdynamo_inline``): while a trace runs, the module globals of
the code being traced that name a ``ScriptFunction`` lead the tracing code to
that Python function (its operations are then recorded like any other code);
everyone else still calls the compiled function, and the globals are put back
when the trace ends (``specfx._capture.patches``).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Set

import torch

from . import patches as _patches

__all__ = ["ScriptedFunctions"]


class ScriptedFunctions:
    """The module globals looked at during one trace."""

    def __init__(self, is_tracing: Callable[[], bool]) -> None:
        self._is_tracing = is_tracing
        self._seen: Set[int] = set()  # ids of globals dicts already looked at

    def cover(self, function: Any) -> None:
        """Make the ``ScriptFunction``s in ``function``'s module globals traceable
        (called inside a ``_patches.tracing()`` session)."""
        if not isinstance(function, types.FunctionType):
            return  # a ScriptModule's compiled forward, a builtin: no Python globals to look at
        namespace = getattr(inspect.unwrap(function), "__globals__", None)
        if namespace is None or id(namespace) in self._seen:
            return
        self._seen.add(id(namespace))
        for name, value in list(namespace.items()):
            # the type first: a global of any class may answer an unknown attribute with an
            # error other than AttributeError (Brevitas' injector classes raise DependencyError)
            if not isinstance(value, torch.jit.ScriptFunction):
                continue
            python = getattr(value, "_torchdynamo_inline", None)
            if isinstance(python, types.FunctionType):
                _patches.patch(namespace, name, self._stand_in(value, python))

    def _stand_in(self, scripted: Any, python: types.FunctionType) -> Callable[..., Any]:
        is_tracing = self._is_tracing

        def run(*args: Any, **kwargs: Any) -> Any:
            return (python if is_tracing() else scripted)(*args, **kwargs)

        return run
