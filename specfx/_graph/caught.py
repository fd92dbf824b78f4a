"""The generated ``forward``'s side of ops traced inside the model's ``try`` blocks: an
exception such an op raises at call time, which the model's handler would catch, becomes
``GuardError`` (the marks themselves are made by :mod:`specfx._frames.caught`)."""

from __future__ import annotations

import torch

from typing import Any, Dict, List, Tuple

from .._frames.caught import CAUGHT, Caught, is_marked, marks, protect_body, target_name
from .._policy.messages import caught_error_failure, caught_lost_by_retrace, short_text
from ..errors import GuardError, SpecializationError

__all__ = ["ProtectingCodeGen", "raise_caught", "retraced"]


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


class ProtectingCodeGen(torch.fx.graph.CodeGen):
    """torch.fx's plain code generation for a graph another tracer made by re-tracing a
    specfx graph's code (``torch.fx.symbolic_trace(gm)``, FX quantization): the marks go
    back on the nodes of the same name and target, and the body runs in one ``try`` as the
    specfx graph's does."""

    def __init__(self, saved: Dict[str, Caught]) -> None:
        super().__init__()
        self.saved = saved

    def additional_globals(self) -> List[Tuple[str, Any]]:
        return [("specfx_raise_caught", raise_caught), ("torch", torch)]

    def _gen_python_code(self, nodes: Any, *args: Any, **kwargs: Any) -> Any:
        nodes = list(nodes)
        for node in nodes:
            caught = self.saved.get(node.name)
            if caught is not None and caught.target == target_name(node):
                node.meta[CAUGHT] = caught
        if not is_marked(nodes):
            return super()._gen_python_code(nodes, *args, **kwargs)
        previous = self._body_transformer
        self._body_transformer = (lambda body: protect_body(previous(body))) if previous else protect_body
        try:
            return super()._gen_python_code(nodes, *args, **kwargs)
        finally:
            self._body_transformer = previous


def retraced(tracer: Any) -> None:
    """Another tracer re-traces the code of a specfx graph (``tracer.root``): a torch.fx graph
    keeps the marks by its code generation (:class:`ProtectingCodeGen`); a tracer whose graphs
    cannot (another copy of torch.fx, Brevitas') is refused: its graph would raise the op's
    error where eager runs the except handler."""
    graph = getattr(getattr(tracer, "root", None), "graph", None)
    saved = marks(graph) if isinstance(graph, torch.fx.Graph) else {}
    if not saved:
        return
    target = getattr(tracer, "graph", None)
    if isinstance(target, torch.fx.Graph) and type(target._codegen) is torch.fx.graph.CodeGen:
        target._codegen = ProtectingCodeGen(saved)
        return
    first = next(iter(saved.values()))
    raise SpecializationError(
        caught_lost_by_retrace(f"{type(tracer).__module__}.{type(tracer).__qualname__}", first.operation,
                               first.where, len(saved)),
        operation=first.operation, location=first.where,
    )
