"""``type(x)`` in traced model code, answered as eager does.

Python's ``type()`` cannot be intercepted: called on a traced value it returns specfx's proxy
class, so ``type(x) is torch.Tensor``, ``type(x) == nn.Parameter`` or
``type(x).__name__ == "Tensor"`` would take the other branch silently. Model code finds ``type``
by name, though, in its module's globals first; so while specfx traces, the module dicts of the
traced code (those of the model's classes and the traced function, and any other module whose
frame specfx sees, at a module's entry or at an op) hold ``type`` =
``_capture.patches.ModelType``, which answers a traced value with its example's class, and
everything else as the builtin does. The answer is a decision like ``isinstance``'s: an input's
exact class is guarded. A ``type()`` call that ran before specfx could shadow the name (in a
helper of another module, before its first op) is still refused (``_frames/bytecode.py`` finds
it, and :meth:`TypeAnswers.answered` tells it from those answered here).

>>> import torch, specfx
>>> def f(x):
...     return x * 2 if type(x) is torch.Tensor else x
>>> gm = specfx.trace(f, torch.ones(2))
>>> gm(torch.ones(2))
tensor([2., 2.])
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import Any, Dict, Set, Tuple

from . import patches as _patches
from .session import TraceSession
from .values import MISSING, ValueProxy, value_of

__all__ = ["TypeAnswers"]


class TypeAnswers:
    """The ``type()`` calls one trace answers (see the module docstring)."""

    def __init__(self, tracer: TraceSession) -> None:
        self._tracer = tracer
        self._answered: Set[Tuple[int, int]] = set()  # (id of the code, offset of the call)

    def install(self, spaces: Any) -> None:
        """Answer ``type()`` in the current tracing session, in the module dicts ``spaces``."""
        _patches.answer_type(self._answer)
        for space in spaces:
            self.shadow(space)

    def shadow(self, namespace: Dict[str, Any]) -> None:
        """Answer ``type()`` in ``namespace`` (a module's globals) too, unless it is torch's or specfx's."""
        name = namespace.get("__name__", "")
        module = sys.modules.get(name)
        if name.split(".")[0] in ("torch", "specfx", "builtins") and getattr(module, "__dict__", None) is namespace:
            return
        _patches.shadow_type(namespace)

    def answered(self, code: types.CodeType, offset: int) -> bool:
        """Whether the ``type()`` call at ``offset`` of ``code`` was answered here (not refused)."""
        return (id(code), offset) in self._answered

    def _answer(self, obj: Any) -> Any:
        kind = builtins.type(obj)
        if not issubclass(kind, ValueProxy) or obj.tracer is not self._tracer or not self._tracer.records_factories():
            return kind
        value = value_of(obj)
        if value is MISSING:
            return kind
        frame = sys._getframe(2)  # (this method, ModelType's __call__, then the model code)
        self._answered.add((id(frame.f_code), frame.f_lasti))
        self._tracer.note_type_read(obj, frame)
        return builtins.type(value)
