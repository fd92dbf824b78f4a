"""Fitting torch.fx's placeholders to the traced function's signature."""

from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable, Optional

import torch.fx

from ._source import SourceLocation

__all__ = ["definition_line", "put_varargs_before_keyword_only"]


def definition_line(fn: Callable[..., Any]) -> Optional[SourceLocation]:
    """The ``def`` line of ``fn`` (its code starts at the first decorator)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return None
    lineno = code.co_firstlineno
    for offset in range(50):  # skip decorator lines
        text = linecache.getline(code.co_filename, lineno + offset).lstrip()
        if text.startswith(("def ", "async def ")):
            lineno += offset
            break
    return SourceLocation(code.co_filename, lineno, getattr(code, "co_qualname", code.co_name))


def put_varargs_before_keyword_only(graph: torch.fx.Graph, root_fn: Callable[..., Any]) -> None:
    """torch.fx creates keyword-only placeholders before ``*args``, so the generated
    ``forward(x, scale=2.0, *extra)`` would bind a positional extra to ``scale``.
    Moving the ``*args`` placeholder first gives ``forward(x, *extra, scale=2.0)``."""
    code = getattr(inspect.unwrap(root_fn), "__code__", None)
    if code is None or not code.co_kwonlyargcount or not code.co_flags & inspect.CO_VARARGS:
        return
    keyword_only = set(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    star = next((n for n in placeholders if isinstance(n.target, str) and n.target.startswith("*")
                 and not n.target.startswith("**")), None)
    first_keyword_only = next((n for n in placeholders if n.target in keyword_only), None)
    if star is not None and first_keyword_only is not None:
        first_keyword_only.prepend(star)
