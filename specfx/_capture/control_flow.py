"""``torch.cond`` in traced code.

``torch.cond(pred, true_fn, false_fn, operands)`` on traced values is a branch on data, as
``if pred:`` is: ``pred`` is decided like any ``bool()`` of a traced value (the ``BOOL`` flag,
a guard on it when granted, a refusal naming the line when not), then the branch taken is
traced through. The graph computes what eager's ``torch.cond`` computes for every input the
guard lets through (eager runs ``torch.cond`` by compiling it; the answer is the branch's).

>>> import torch, specfx
>>> def f(x):
...     return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))
>>> gm = specfx.trace(f, torch.ones(2), policy=specfx.Policy(bool=True))
>>> gm(torch.ones(2))
tensor([2., 2.])
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.proxy import Proxy

from . import patches as _patches
from .session import TraceSession

__all__ = ["install"]


def install(tracer: TraceSession) -> None:
    """Within the current tracing session, ``torch.cond`` on traced values takes the decided branch."""

    def cond(pred: Any, true_fn: Any, false_fn: Any, operands: Any = (), *args: Any, **kwargs: Any) -> Any:
        traced = any(isinstance(a, Proxy) for a in torch.utils._pytree.tree_leaves((pred, operands)))
        if not tracer.records_factories() or not traced or args or kwargs:
            return _patches.previous(torch, "cond")(pred, true_fn, false_fn, operands, *args, **kwargs)
        taken = true_fn if bool(pred) else false_fn  # (a decision at the caller's line)
        return taken(*operands)

    _patches.patch(torch, "cond", cond)
