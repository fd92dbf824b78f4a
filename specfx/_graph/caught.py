"""The generated ``forward``'s side of ops traced inside the model's ``try`` blocks: an
exception such an op raises at call time, which the model's handler would catch, becomes
``GuardError`` (the marks themselves are made by :mod:`specfx._frames.caught`)."""

from __future__ import annotations

import torch

from .._frames.caught import CAUGHT
from .._policy.messages import caught_error_failure, short_text
from ..errors import GuardError

__all__ = ["raise_caught"]


def raise_caught(gm: torch.fx.GraphModule, error: BaseException) -> None:
    """Called by the generated ``forward`` with an exception its body raised: when a
    marked node raised it and the model's handler catches it, raise ``GuardError``.

    >>> import torch, specfx
    >>> def f(x, y):
    ...     try:
    ...         return x @ y
    ...     except RuntimeError:
    ...         return x * y.sum()
    >>> gm = specfx.trace(f, (torch.ones(2, 3), torch.ones(3, 2)))
    >>> try:
    ...     gm(torch.ones(2, 3), torch.ones(2, 3))
    ... except specfx.GuardError as e:
    ...     print(e.kind, type(e.__cause__).__name__)
    caught RuntimeError
    """
    if isinstance(error, GuardError):
        return
    traceback = error.__traceback__
    lineno_map = getattr(gm, "_lineno_map", None)
    if traceback is None or not lineno_map:
        return
    index = lineno_map.get(traceback.tb_lineno - getattr(gm, "_prologue_start", 0))
    if index is None:
        return
    node = next((n for i, n in enumerate(gm.graph.nodes) if i == index), None)
    caught = node.meta.get(CAUGHT) if node is not None else None
    handler = caught.handler_for(error) if caught is not None else None
    if caught is None or handler is None:
        return
    raise GuardError(caught_error_failure(caught.operation, caught.where, error, handler), expression=caught.operation, kind="caught", expected="no exception",
                     actual=f"{type(error).__name__}: {short_text(str(error))}", location=caught.where) from error


raise_caught.__module__ = "specfx"  # generated code and pickles import it from the public package
