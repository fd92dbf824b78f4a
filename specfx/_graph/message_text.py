"""The message a graph builds at run time from traced values (``torch._assert``'s text).

While tracing, a traced value formatted for a message the graph records is a
:func:`placeholder` (it carries the traced text, shown if the message is raised while
tracing); when the message reaches the recorded call, the tracer replaces it by a
:func:`format_message` node, so the graph shows the run-time values, as eager does.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from torch.fx.proxy import Proxy

from ..guards import _is_foreign_proxy

__all__ = ["format_message", "has_placeholders", "placeholder", "split_placeholders"]


# (private-use characters: no model's message holds them)
_OPEN, _MIDDLE, _CLOSE = "\ue000", "\ue001", "\ue002"


def placeholder(index: int, traced_text: str) -> str:
    """The text standing for formatted value ``index`` until its sink is recorded."""
    return f"{_OPEN}{index}{_MIDDLE}{traced_text}{_CLOSE}"


def has_placeholders(text: Any) -> bool:
    """Whether ``text`` is a str holding a :func:`placeholder`."""
    return type(text) is str and _OPEN in text


def split_placeholders(text: str) -> Tuple[Tuple[str, ...], Tuple[int, ...]]:
    """``(literals, indices)``: the text around the placeholders, and their indices."""
    literals: List[str] = []
    indices: List[int] = []
    rest = text
    while _OPEN in rest:
        before, _, after = rest.partition(_OPEN)
        index, _, after = after.partition(_MIDDLE)
        _, _, rest = after.partition(_CLOSE)
        literals.append(before)
        indices.append(int(index))
    literals.append(rest)
    return tuple(literals), tuple(indices)


def format_message(literals: Tuple[str, ...], specs: Tuple[str, ...], *values: Any) -> str:
    """The message a graph builds at run time: ``literals`` with each value formatted by its
    spec between them, as the model's f-string built it in eager.

    >>> format_message(("got ", "!"), ("",), 3)
    'got 3!'
    """
    for value in values:  # re-tracing the graph (deepcopy, unpickling): record the call again
        if isinstance(value, Proxy) or _is_foreign_proxy(value):
            return value.tracer.create_proxy("call_function", format_message, (literals, specs, *values), {})
    parts = [literals[0]]
    for value, spec, literal in zip(values, specs, literals[1:]):
        parts.append(format(value, spec))
        parts.append(literal)
    return "".join(parts)


format_message.__module__ = "specfx"  # generated code imports it from the package
