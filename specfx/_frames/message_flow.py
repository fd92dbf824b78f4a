"""Text that only feeds a message: formatting a traced value there is not a decision.

``torch._assert(h == 224, f"Wrong height: expected 224, got {h}")`` formats ``h`` on
every call, even when the assertion holds; the text never changes what the graph
computes. specfx reads the formatting frame's bytecode (the stack simulation of
``_bytecode.py``) from the instruction that produced the text: if every path of the
text ends as an argument of a message sink — ``torch._assert``, an exception class
(``raise ValueError(...)``, ``assert``'s message), ``warnings.warn``, a
``logging.Logger`` method — through nothing but string building (f-strings, ``+``,
``%``, tuples of ``%`` arguments), the formatting is free: no flag, no guard.
Anything else (the text compared, stored in a name, returned) is an ordinary
decision, as before.
"""

from __future__ import annotations

import bisect
import dis
import logging
import types
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.fx._symbolic_trace import _assert_is_none

from .bytecode import CALL_FORMS, Attribute, _effect, _instructions, _site, _step, _Unanalyzable, simulate
from .type_reads import _ABSENT, _resolve

__all__ = ["GRAPH", "STORED", "TEXT", "message_sink", "only_stored", "resolve_described", "value_consumers"]

GRAPH = "graph"  # the sink is recorded in the graph (torch._assert): the text may be built at run time
TEXT = "text"  # the sink runs at trace time only (an exception, a warning, a log line)


class _Text:
    """The stack entry holding the text being followed."""

    def __repr__(self) -> str:
        return "<text>"


_FOLLOWED = _Text()


class _Stored:
    """The consumer recorded when the followed value is stored into a local name."""

    def __repr__(self) -> str:
        return "<stored in a local name>"


STORED = _Stored()
_NAME_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"})
# Instructions whose result is built from the text (and so is text too).
_BUILDING = frozenset({"BUILD_STRING", "FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE",
                       "BUILD_TUPLE", "LIST_APPEND", "BUILD_LIST", "LIST_TO_TUPLE"})
# Instructions whose result is computed from the text's value (`{h // p}`, `{x.shape[2]}`).
_DERIVING = frozenset({"BINARY_OP", "BINARY_SUBSCR", "UNARY_NEGATIVE", "LOAD_ATTR"})
_LOG_RECORD_MESSAGE = logging.LogRecord.getMessage.__code__
_STEPS = 400  # a message is built in one statement: give up after this many instructions
_CONSUMERS: Dict[Tuple[types.CodeType, int], Optional[Tuple[Any, ...]]] = {}


def _consumers(code: types.CodeType, offset: int) -> Optional[Tuple[Any, ...]]:
    """The callables (as the bytecode describes them) that receive the text produced by the
    instruction at ``offset``, or None if the text goes anywhere else (or cannot be followed)."""
    listing, position = _instructions(code)
    offsets = [inst.offset for inst in listing]
    index = bisect.bisect_right(offsets, offset) - 1
    if index < 0:
        return None
    seen: List[Tuple[List[Any], bool]] = []

    def visit(at: int, inst: dis.Instruction, stack: List[Any], keywords: bool) -> None:
        if at == index and not seen:
            seen.append((list(stack), keywords))

    try:
        simulate(code, visit)
        if not seen:
            return None
        stack, keywords = seen[0]
        origin = listing[index]
        _step(origin, stack, _effect(origin, False), CALL_FORMS)
        if not stack:
            return None
        stack[-1] = _FOLLOWED  # (a CALL that runs the call leaves its result on top: the same)
        return _follow(listing, index + 1, stack, origin.opname in CALL_FORMS.keywords)
    except (_Unanalyzable, ValueError, IndexError, KeyError):
        return None


def _follow(listing: List[dis.Instruction], index: int, stack: List[Any], keywords: bool) -> Optional[Tuple[Any, ...]]:
    consumers: List[Any] = []
    for inst in listing[index:index + _STEPS]:
        held = [i for i, entry in enumerate(stack) if entry is _FOLLOWED]
        if not held:
            return tuple(consumers) or None
        if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs or inst.opname.startswith(("RETURN", "RAISE")):
            return None  # a branch or an exit with the text still on the stack: not followed
        site = _site(inst, stack, keywords, CALL_FORMS)
        keywords = inst.opname in CALL_FORMS.keywords
        after = list(stack)
        _step(inst, after, _effect(inst, False), CALL_FORMS)
        if all(i < len(after) and after[i] is _FOLLOWED for i in held):
            stack = after
            continue
        if site is not None and site.kind == "call":
            if site.callable is None:
                return None
            consumers.append(site.callable)
        elif inst.opname in _NAME_STORES and stack and stack[-1] is _FOLLOWED:
            consumers.append(STORED)  # `n = x.shape[0]`: the name holds it from here on
        elif inst.opname in _BUILDING or inst.opname in _DERIVING:
            after[-1] = _FOLLOWED
        else:
            return None
        stack = after
    return None


def value_consumers(frame: types.FrameType) -> Optional[Tuple[Any, ...]]:
    """The callables (as the bytecode describes them: resolve them with
    :func:`resolve_described`) that receive the value ``frame``'s current instruction makes,
    directly or inside a tuple, list or string built from it; None if it goes anywhere else."""
    key = (frame.f_code, frame.f_lasti)
    try:
        return _CONSUMERS[key]
    except KeyError:
        found = _CONSUMERS[key] = _consumers(frame.f_code, frame.f_lasti)
        return found


def only_stored(frame: types.FrameType) -> bool:
    """Whether the value ``frame``'s current instruction makes, or values built from it
    (``x.size()[:-2] + (h,)``, ``x.shape[0] * 2``), only go into local names.

    >>> import sys
    >>> class Tensor:
    ...     @property
    ...     def shape(self):
    ...         return (only_stored(sys._getframe(1)), 4)
    >>> def f(x):
    ...     n = x.shape[0]
    ...     head = x.shape[:-1] + (2,)
    ...     return n, head[0], x.shape[0]
    >>> f(Tensor())
    (True, True, False)
    """
    consumers = value_consumers(frame)
    return consumers is not None and all(described is STORED for described in consumers)


def resolve_described(described: Any, frame: types.FrameType) -> Any:
    """The value a described callable (or its base) has in ``frame`` now, read without running
    code; ``None`` when that is impossible."""
    value = _resolve(described, frame)
    return None if value is _ABSENT else value


def _sink(described: Any, frame: types.FrameType) -> Optional[str]:
    value = _resolve(described, frame)
    if value is torch._assert or value is _assert_is_none:
        return GRAPH
    if isinstance(value, type) and issubclass(value, BaseException):
        return TEXT
    if value is warnings.warn or value is warnings.warn_explicit:
        return TEXT
    if type(described) is Attribute and isinstance(_resolve(described.base, frame),
                                                   (logging.Logger, logging.LoggerAdapter)):
        return TEXT
    return None


def message_sink(frame: types.FrameType) -> Optional[str]:
    """If the text that ``frame``'s current instruction produces only feeds message sinks:
    :data:`GRAPH` when every sink is recorded in the graph, else :data:`TEXT`; None otherwise.

    >>> import sys
    >>> class Shown:
    ...     def __format__(self, spec):
    ...         return str(message_sink(sys._getframe(1)))
    >>> def check(h):
    ...     text = f"{h}"
    ...     return text, ValueError(f"got {h}").args[0]
    >>> check(Shown())
    ('None', 'got text')
    """
    if frame.f_code is _LOG_RECORD_MESSAGE:  # `logger.warning("%s rows", n)`: logging formats it
        return TEXT
    consumers = value_consumers(frame)
    if not consumers:
        return None
    kinds = set()
    for described in consumers:
        kind = _sink(described, frame)
        if kind is None:
            return None
        kinds.add(kind)
    return GRAPH if kinds == {GRAPH} else TEXT
