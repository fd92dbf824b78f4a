"""Custom autograd Functions and reentrant activation checkpointing in traced code.

Traced through, ``SomeFunction.apply(x)`` would leave its ``forward``'s ops in the graph
and lose its ``backward``: a straight-through estimator (``round`` forward, identity
backward, as in every QAT fake-quantizer) would get ``round``'s zero gradient, and
``ctx.needs_input_grad`` would read as the trace's proxies make it, not as the
caller's tensors do. So while specfx traces, ``apply`` with a traced argument is one
graph node that calls the Function: when the graph runs, eager's ``forward`` runs on
the real tensors and autograd records eager's ``backward``. The Function class is held
by the graph module (a ``get_attr`` of ``_autograd_function_<Name>``), so the code
reads ``self._autograd_function_STE.apply(x)`` and the graph pickles the class by
reference, as ``torch.save`` pickles a model's classes.

``torch.utils.checkpoint``'s reentrant form is a Function whose first argument is the
function to run, which no graph can hold; eager runs that function under
``torch.no_grad()`` and its output requires grad only when a tensor argument does (the
parameters inside get gradients through the recomputation in backward). specfx traces
the function itself, under the grad mode that gives the same gradients: the caller's
mode when some tensor argument requires grad, else off (checkpointing trades memory
for compute; the gradients are those of the function without it).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Dict, Tuple

import torch
import torch.utils.checkpoint
from torch.fx.node import map_aggregate
from torch.fx.proxy import Proxy

from . import patches as _patches
from .._frames.source import user_location
from .._policy.messages import autograd_function_argument, backward_in_forward
from ..errors import SpecializationError
from .session import TraceSession
from .values import value_of

__all__ = ["install"]

_HOLDER_PREFIX = "_autograd_function_"


def _has_proxy(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    found = []

    def visit(a: Any) -> Any:
        if isinstance(a, Proxy):
            found.append(a)
        return a

    map_aggregate((args, kwargs), visit)
    return bool(found)


def install(tracer: TraceSession) -> None:
    """Patch ``torch.autograd.Function.apply`` for the tracing context (see the module docstring);
    ``torch.autograd.grad`` on traced values is one graph call (autograd differentiates the graph's
    own values at run time, as eager's), ``torch.autograd.backward`` is refused (the trace would
    accumulate into the model's ``.grad``).

    ``apply``'s calls are caught however it is held: ``round_ste = RoundSte.apply`` at import
    (the usual way to export a Function, Brevitas' straight-through estimators among them)
    holds a bound method made before the trace, which a patched class attribute would miss."""

    def apply(original: Any, cls: Any, *args: Any, **kwargs: Any) -> Any:
        if tracer.records_factories() and _has_proxy(args, kwargs):
            if cls is torch.utils.checkpoint.CheckpointFunction:
                return _reentrant_checkpoint(tracer, *args, **kwargs)
            return _record(tracer, cls, args, kwargs)
        return original(cls, *args, **kwargs)

    _patches.patch_calls(torch.autograd.Function.__dict__["apply"].__func__, apply)

    # (caught however they are held: `from torch.autograd import grad` binds the function early)
    differentiate: Any = torch.autograd.grad
    accumulate: Any = torch.autograd.backward

    def grad(original: Any, *args: Any, **kwargs: Any) -> Any:
        if tracer.records_factories() and _has_proxy(args, kwargs):
            return tracer.create_proxy("call_function", differentiate, args, kwargs)
        return original(*args, **kwargs)

    _patches.patch_calls(differentiate, grad)

    def backward(original: Any, *args: Any, **kwargs: Any) -> Any:
        if tracer.records_factories() and _has_proxy(args, kwargs):
            location = user_location()
            tracer.refuse(SpecializationError(backward_in_forward("torch.autograd.backward()", location),
                                              operation="torch.autograd.backward()",
                                              location=str(location) if location else None))
        return original(*args, **kwargs)

    _patches.patch_calls(accumulate, backward)


def _record(tracer: TraceSession, cls: type, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    unheld = _unheld_argument(args, kwargs)
    if unheld is not None:
        location = user_location()
        tracer.refuse(SpecializationError(
            autograd_function_argument(cls.__qualname__, type(unheld).__name__, location),
            operation=f"{cls.__qualname__}.apply", location=str(location) if location else None))
    return tracer.create_proxy("call_method", "apply", (tracer.constant_proxy(cls, _HOLDER_PREFIX), *args), kwargs)


# What a graph's call can take besides traced values and tensors (torch.fx's constants).
_HELD_CONSTANTS = (int, float, bool, complex, str, type(None), type(...), slice, torch.dtype, torch.device,
                   torch.layout, torch.memory_format)


def _unheld_argument(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """The first argument (in containers too) that no graph node can take, if any."""
    found: list = []

    def visit(a: Any) -> Any:
        if not found and not isinstance(a, (Proxy, torch.Tensor, *_HELD_CONSTANTS)):
            found.append(a)
        return a

    map_aggregate((args, kwargs), visit)
    return found[0] if found else None


def _reentrant_checkpoint(tracer: TraceSession, function: Any, preserve_rng_state: Any, *args: Any) -> Any:
    """``function(*args)`` traced under the grad mode of eager's reentrant checkpoint: the
    caller's, and on only if a tensor argument requires grad (both read when the graph runs)."""
    set_grad_enabled = torch._C._set_grad_enabled  # (specfx's patch: records the switch, ambient.py)
    enabled = tracer.create_proxy("call_function", torch._C.is_grad_enabled, (), {})
    if any(isinstance(a, torch.Tensor) and not isinstance(a, Proxy) and a.requires_grad for a in args):
        mode: Any = enabled
    else:
        needs = [tracer.create_proxy("call_function", getattr, (a, "requires_grad"), {})
                 for a in args if isinstance(a, Proxy) and isinstance(value_of(a), torch.Tensor)]
        if needs:
            mode = tracer.create_proxy("call_function", operator.and_,
                                       (enabled, functools.reduce(_or(tracer), needs)), {})
        else:
            mode = False
    set_grad_enabled(mode)
    try:
        return function(*args)
    finally:
        set_grad_enabled(enabled)


def _or(tracer: TraceSession) -> Any:
    return lambda a, b: tracer.create_proxy("call_function", operator.or_, (a, b), {})


