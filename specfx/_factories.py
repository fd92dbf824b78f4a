"""Tensors created during ``forward`` are created by the graph, at run time.

torch.fx bakes a tensor that model code makes from Python values (``torch.zeros(n, 2)``,
``torch.randn(x.shape)``, ``torch.arange(seq_len)``) into the graph as one shared
constant: the same noise on every call, a buffer that accumulates across calls, an
output object that the next call overwrites. And a size that is a traced value
(``torch.ones(x.shape[1] * 2, 3)``, ``torch.tensor(q.size(-1))``) makes torch's
argument parser raise before ``__torch_function__`` can see the proxy.

So while specfx traces with example inputs, the factory functions of ``torch``
(patched through :mod:`specfx._patches`, for the tracing context only) record a
``call_function`` node instead: sizes that are traced values stay symbolic, random
draws are drawn anew on every call, and a decision on a drawn value is an ordinary
guarded one. Without example inputs only calls that hold a traced value are recorded
(plain torch.fx raises on them); the others stay constants, as in torch.fx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from . import _patches
from ._evaluation import proxies_in

if TYPE_CHECKING:
    from ._tracer import SpecTracer

__all__ = ["FACTORIES", "record_factories"]

FACTORIES = (
    "arange", "empty", "eye", "full", "linspace", "logspace", "ones", "rand", "randint", "randn",
    "randperm", "range", "scalar_tensor", "tensor", "zeros", "empty_like", "full_like", "ones_like",
    "rand_like", "randint_like", "randn_like", "zeros_like", "bernoulli", "multinomial", "normal", "poisson",
)


def _recording(tracer: "SpecTracer", name: str) -> Callable[..., Any]:
    def factory(*args: Any, **kwargs: Any) -> Any:
        original = _patches.previous(torch, name)
        if not tracer.records_factories():
            return original(*args, **kwargs)
        if tracer.examples is None and not any(True for _ in proxies_in(args, kwargs)):
            return original(*args, **kwargs)  # a constant, as torch.fx makes it
        return tracer.create_proxy("call_function", original, args, kwargs)

    factory.__name__ = name
    return factory


def record_factories(tracer: "SpecTracer") -> None:
    """Within the current ``_patches.tracing()`` session, torch's factories called
    by the traced code become nodes of ``tracer``'s graph."""
    for name in FACTORIES:
        _patches.patch(torch, name, _recording(tracer, name))
