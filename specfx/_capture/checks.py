"""``torch._check`` and its kin with a traced condition: an assertion the graph makes.

``torch._check(cond, msg)``, ``torch._check_with(ValueError, cond, msg)`` and
``torch._check_tensor_all(_with)`` raise when ``cond`` is false; model code calls them for
what must hold of its inputs (transformers 5's ``torch_compilable_check`` for the image
tokens matching the image features). The answer is no branch: either the call returns or it
raises. While specfx traces, a traced condition is recorded as ``torch._assert(cond, text)``
(the test runs on every call of the graph, with the message the graph formats from the
run-time values where the model's f-string formatted traced ones), in place of a guarded
``bool()`` of it; a condition false on the examples raises while tracing, as eager does. A
condition that is a plain Python value runs torch's own check.

>>> import torch, specfx
>>> class M(torch.nn.Module):
...     def forward(self, x):
...         torch._check(x.sum() > -1e9, lambda: "too small")
...         return x + 1
>>> gm = specfx.trace(M(), (torch.ones(2),))
>>> "torch._assert" in gm.code
True
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Type

import torch

from . import patches as _patches
from .session import TraceSession

__all__ = ["install_checks"]


def _text(error_type: Type[BaseException], message: Optional[Callable[[], Any]]) -> str:
    text = "Expected cond to be True" if message is None else str(message())
    return f"{error_type.__name__}: {text}"


def install_checks(tracer: TraceSession) -> None:
    """In the current ``_patches.tracing()`` session: torch's check functions record a graph
    assertion for a traced condition that model code passes them."""
    check_with = _patches.previous(torch, "_check_with")
    check_tensor_all_with = _patches.previous(torch, "_check_tensor_all_with")

    def traced(cond: Any) -> bool:
        return isinstance(cond, torch.fx.Proxy) and cond.tracer is tracer and tracer.records_factories()  # type: ignore[comparison-overlap]  # (the session is the tracer)

    def checked_with(error_type: Type[BaseException], cond: Any, message: Optional[Callable[[], Any]] = None) -> None:
        if not traced(cond):
            return check_with(error_type, cond, message)
        torch._assert(cond, _text(error_type, message))  # type: ignore[no-untyped-call]

    def checked_tensor_all_with(error_type: Type[BaseException], cond: Any,
                                message: Optional[Callable[[], Any]] = None) -> None:
        if not traced(cond):
            return check_tensor_all_with(error_type, cond, message)
        torch._assert(cond.all(), _text(error_type, message))  # type: ignore[no-untyped-call]

    # torch._check, _check_index, _check_value, ... call the module's _check_with
    _patches.patch(torch, "_check_with", checked_with)
    _patches.patch(torch, "_check_tensor_all_with", checked_tensor_all_with)
