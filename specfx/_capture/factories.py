"""Tensors created during ``forward`` are created by the graph, at run time.

torch.fx bakes a tensor that model code makes from Python values (``torch.zeros(n, 2)``,
``torch.randn(x.shape)``, ``torch.arange(seq_len)``) into the graph as one shared
constant: the same noise on every call, a buffer that accumulates across calls, an
output object that the next call overwrites. And a size that is a traced value
(``torch.ones(x.shape[1] * 2, 3)``, ``torch.tensor(q.size(-1))``) makes torch's
argument parser raise before ``__torch_function__`` can see the proxy; ``torch.as_tensor(t)``
of a traced tensor reads the proxy as a DLPack capsule before that.

So while specfx traces with example inputs, the factory functions of ``torch``
(patched through :mod:`specfx._capture.patches`, for the tracing context only) record a
``call_function`` node instead: sizes that are traced values stay symbolic, random
draws are drawn anew on every call, and a decision on a drawn value is an ordinary
guarded one. Without example inputs only calls that hold a traced value are recorded
(plain torch.fx raises on them); the others stay constants, as in torch.fx,
except in a graph's own generated code (re-tracing a GraphModule), where every
factory call is a node of the graph being reproduced.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

import torch
from torch.fx.graph_module import _CodeOnlyModule

from . import patches as _patches
from .evaluation import proxies_in
from .._frames.source import is_user_file, user_location
from ..errors import SpecializationError
from .session import TraceSession
from .._policy.messages import generator_in_forward


__all__ = ["FACTORIES", "check_generator", "record_factories"]

FACTORIES = (
    "arange", "empty", "eye", "full", "linspace", "logspace", "ones", "rand", "randint", "randn",
    "randperm", "range", "scalar_tensor", "tensor", "as_tensor", "asarray", "zeros", "empty_like", "full_like", "ones_like",
    "rand_like", "randint_like", "randn_like", "zeros_like", "bernoulli", "multinomial", "normal", "poisson",
)


def _recording(tracer: TraceSession, name: str) -> Callable[..., Any]:
    def factory(*args: Any, **kwargs: Any) -> Any:
        original = _patches.previous(torch, name)
        if not tracer.records_factories():
            return original(*args, **kwargs)
        if tracer.examples is None and not any(True for _ in proxies_in(args, kwargs)) \
                and not isinstance(tracer.root, (torch.fx.GraphModule, _CodeOnlyModule)):
            # A constant, as torch.fx makes it; but in a graph's own code (unpickling,
            # specfx.trace(gm)) a factory call is a node of that graph and stays one.
            return original(*args, **kwargs)
        return tracer.create_proxy("call_function", original, args, kwargs)

    factory.__name__ = name
    return factory


def record_factories(tracer: TraceSession) -> None:
    """Within the current ``_patches.tracing()`` session, torch's factories called
    by the traced code become nodes of ``tracer``'s graph."""
    for name in FACTORIES:
        _patches.patch(torch, name, _recording(tracer, name))


def check_generator(tracer: TraceSession, generator: torch.Generator) -> None:
    """Refuse a ``torch.Generator`` that the traced code made while it ran.

    A generator the graph holds as a constant keeps its state between calls. That is
    eager's behaviour for a generator that outlives a call (torch's default one, one the
    model or its module's globals hold), but not for one made inside ``forward``
    (``torch.Generator().manual_seed(k)``): eager starts it afresh on every call, the graph
    would continue its draws. A generator passed as an argument is an input, not a constant.
    """
    if not tracer.records_factories() or _outlives_call(tracer, generator):
        return
    location = user_location()
    tracer.refuse(SpecializationError(generator_in_forward(location), operation="torch.Generator()",
                                      location=str(location) if location else None))


def _outlives_call(tracer: TraceSession, generator: torch.Generator) -> bool:
    if generator is torch.default_generator:
        return True
    cuda = getattr(torch.cuda, "default_generators", ())
    if any(generator is g for g in cuda):
        return True
    root = getattr(tracer, "root", None)
    if isinstance(root, torch.nn.Module):
        for module in root.modules():
            if any(value is generator for value in _held(module.__dict__.values())):
                return True
    frame = sys._getframe(1)
    while frame is not None:  # module globals and closures of the code being traced
        if is_user_file(frame.f_code.co_filename):
            if any(value is generator for value in _held(frame.f_globals.values())):
                return True
            closure = frame.f_code.co_freevars
            if closure and any(frame.f_locals.get(name) is generator for name in closure):
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _held(values: Any, depth: int = 2) -> Iterator[Any]:
    """The values, and those inside lists, tuples and dicts among them (``depth`` levels)."""
    for value in values:
        yield value
        if depth and type(value) in (list, tuple, dict):
            yield from _held(value.values() if type(value) is dict else value, depth - 1)
