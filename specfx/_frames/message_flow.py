"""Text that only feeds a message: formatting a traced value there is not a decision.

``torch._assert(h == 224, f"Wrong height: expected 224, got {h}")`` formats ``h`` on
every call, even when the assertion holds; the text never changes what the graph
computes. specfx reads the formatting frame's bytecode (the stack simulation of
``_bytecode.py``) from the instruction that produced the text: if every path of the
text ends as an argument of a message sink — ``torch._assert``, an exception class
(``raise ValueError(...)``, ``assert``'s message), ``warnings.warn``, a
``logging.Logger`` method — through nothing but string building (f-strings, ``+``,
``%``, tuples of ``%`` arguments), the formatting is free: no flag, no guard.
A library's own check function that raises or warns with the text it is given
(transformers' ``torch_compilable_check(cond, f"... {n}")``) is registered as a sink
with :func:`register_message_function` by the layer that knows the library.
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

__all__ = ["GRAPH", "TEXT", "message_sink", "only_stored", "register_message_function", "resolve_described",
           "value_consumers"]

GRAPH = "graph"  # the sink is recorded in the graph (torch._assert): the text may be built at run time
TEXT = "text"  # the sink runs at trace time only (an exception, a warning, a log line)


class _Text:
    """The stack entry holding the text being followed."""

    def __repr__(self) -> str:
        return "<text>"


_FOLLOWED = _Text()


class _Stored:
    """The consumer recorded when the followed value is stored into a local name (``None``:
    a fused store whose name specfx does not single out)."""

    def __init__(self, name: Optional[str]) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<stored in {self.name}>"


class _Dropped:
    """The consumer recorded when the text is only tested for identity (``message is not None``)."""

    def __repr__(self) -> str:
        return "<identity test>"


_DROPPED = _Dropped()
_NAME_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_NAME"})
_NAME_STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"})
# Instructions whose result is built from the text (and so is text too).
_BUILDING = frozenset({"BUILD_STRING", "FORMAT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "CONVERT_VALUE",
                       "BUILD_TUPLE", "LIST_APPEND", "BUILD_LIST", "LIST_TO_TUPLE"})
# Instructions whose result is computed from the text's value (`{h // p}`, `{x.shape[2]}`).
_DERIVING = frozenset({"BINARY_OP", "BINARY_SUBSCR", "BINARY_SLICE", "UNARY_NEGATIVE", "LOAD_ATTR"})
_LOG_RECORD_MESSAGE = logging.LogRecord.getMessage.__code__
_STEPS = 400  # a message is built in one statement: give up after this many instructions
_CONSUMERS: Dict[Tuple[types.CodeType, int], Optional[Tuple[Any, ...]]] = {}
# functions that use the text they are given only as the message of what they raise or warn,
# with the sink kind of that message (by id: a module-level function lives as long as its module)
_MESSAGE_FUNCTIONS: Dict[int, Tuple[Any, str]] = {}


def register_message_function(function: Any, kind: str = TEXT) -> None:
    """Text passed to ``function`` is a message: ``function`` only raises or warns with it
    (e.g. transformers' ``torch_compilable_check(cond, msg)``), never computes with it.
    ``kind`` is :data:`GRAPH` when the text reaches a call the graph records (a check that
    becomes a graph assertion), else :data:`TEXT`.

    >>> def check(cond, msg):
    ...     if not cond:
    ...         raise ValueError(msg)
    >>> register_message_function(check)
    >>> _MESSAGE_FUNCTIONS[id(check)] == (check, TEXT)
    True
    """
    _MESSAGE_FUNCTIONS[id(function)] = (function, kind)


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
        if inst.opname.endswith(("_IF_NONE", "_IF_NOT_NONE")) and held == [len(stack) - 1]:
            return tuple(consumers) + (_DROPPED,)  # `if message is not None:` (3.11-3.13's fused jump)
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
            # `n = x.shape[0]`: the name holds it from here on
            consumers.append(_Stored(inst.argval if type(inst.argval) is str else None))
        elif inst.opname == "IS_OP":
            consumers.append(_DROPPED)  # `message is not None` reads nothing of the text
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
    return _cached(frame.f_code, frame.f_lasti)


def _cached(code: types.CodeType, offset: int) -> Optional[Tuple[Any, ...]]:
    key = (code, offset)
    try:
        return _CONSUMERS[key]
    except KeyError:
        found = _CONSUMERS[key] = _consumers(code, offset)
        return found


def _name_loads(code: types.CodeType, name: str) -> Optional[List[int]]:
    """The offsets of every plain load of local ``name`` in ``code``; None where a load of it
    cannot be followed alone (a closure cell, a fused or clearing load)."""
    if name in code.co_cellvars or name in code.co_freevars:
        return None
    listing, _ = _instructions(code)
    offsets = []
    for inst in listing:
        if inst.opname in _NAME_LOADS and inst.argval == name:
            offsets.append(inst.offset)
        elif inst.opname.startswith("LOAD_FAST") and inst.argval != name and name in (
                inst.argval if type(inst.argval) is tuple else ()):
            return None
        elif inst.opname == "LOAD_FAST_AND_CLEAR" and inst.argval == name:
            return None
    return offsets


def _text_consumers(frame: types.FrameType) -> Tuple[Optional[Tuple[Any, ...]], bool]:
    """The consumers of the text ``frame``'s current instruction makes, following it through
    the local names it is stored in (``message = f"..."`` then ``raise ValueError(message)``,
    ``warnings.warn(message)``); and whether a name was followed."""
    consumers = value_consumers(frame)
    if consumers is None:
        return None, False
    code = frame.f_code
    found: List[Any] = []
    followed: set = set()
    pending = list(consumers)
    while pending:
        described = pending.pop()
        if described is _DROPPED:
            continue
        if type(described) is not _Stored:
            found.append(described)
            continue
        if described.name is None:
            return None, True
        if described.name in followed:
            continue
        followed.add(described.name)
        loads = _name_loads(code, described.name)
        if loads is None or len(followed) > 8:
            return None, True
        for offset in loads:
            more = _cached(code, offset)
            if more is None:
                return None, True
            pending.extend(more)
    return (tuple(found) or None), bool(followed)


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
    return consumers is not None and all(type(described) is _Stored for described in consumers)


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
    registered = _MESSAGE_FUNCTIONS.get(id(value))
    if registered is not None and registered[0] is value:
        return registered[1]
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
    consumers, _ = _text_consumers(frame)
    if not consumers:
        return None
    kinds = set()
    for described in consumers:
        kind = _sink(described, frame)
        if kind is None:
            return None
        kinds.add(kind)
    return GRAPH if kinds == {GRAPH} else TEXT
