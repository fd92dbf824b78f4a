"""Fitting torch.fx's placeholders to the traced function's signature."""

from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable, Optional

import torch.fx

from .._frames.source import SourceLocation
from ..errors import SpecializationError
from .._policy.messages import hooks_with_kwargs

__all__ = ["default_to_concrete_values", "definition_line", "optional_parameters", "put_varargs_before_keyword_only", "with_root_hooks"]


def with_root_hooks(
    fn: Callable[..., Any], root: torch.nn.Module, refuse: Callable[[BaseException], Any]
) -> Callable[..., Any]:
    """``fn`` (the root's forward, as torch.fx calls it) with the root's forward pre-hooks
    and hooks around it, as ``root(...)`` runs them: torch.fx traces ``forward`` alone."""
    pre_hooks, hooks = list(root._forward_pre_hooks.values()), list(root._forward_hooks.values())
    if not pre_hooks and not hooks:
        return fn
    if root._forward_pre_hooks_with_kwargs or root._forward_hooks_with_kwargs:
        refuse(SpecializationError(hooks_with_kwargs(type(root).__name__), operation="forward hooks"))

    def hooked(module: Any, *args: Any) -> Any:
        for hook in pre_hooks:
            result = hook(root, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        output = fn(module, *args)
        for hook in hooks:
            result = hook(root, args, output)
            if result is not None:
                output = result
        return output

    return hooked


def optional_parameters(fn: Callable[..., Any]) -> frozenset:
    """The names of ``fn``'s parameters whose default is None (the caller may pass None)."""
    try:
        parameters = inspect.signature(inspect.unwrap(fn)).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in parameters if p.default is None)


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


def default_to_concrete_values(graph: torch.fx.Graph, concrete_args: Any) -> None:
    """torch.fx keeps the parameter of a ``concrete_args`` entry (``use_cache_1``), defaulting
    to the signature's default, and asserts it equals the baked-in value. Defaulting to that
    value instead lets the graph be called as the model is (``gm(**batch)``); any other
    value still fails the assert."""
    if not isinstance(concrete_args, dict):
        return
    for node in graph.nodes:
        if node.op != "placeholder" or not isinstance(node.target, str):
            continue
        name, _, count = node.target.rpartition("_")
        if count.isdigit() and name in concrete_args and type(concrete_args[name]) in (bool, int, float, str) \
                and node.args:
            node.args = (concrete_args[name],)
