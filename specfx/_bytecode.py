"""What specfx reads from the caller's bytecode, with every Python-version difference
in one table.

Two questions are answered from the instruction being executed: is a ``.shape``
read followed by a constant subscript (``x.shape[1]`` reads one dimension), and is
an iteration an unpacking into a fixed number of names (``a, b = t``).
"""

from __future__ import annotations

import dis
import sys
import types
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

__all__ = ["FORMS", "BytecodeForms", "Handler", "clause_types", "constant_subscript_next", "exception_handlers",
           "forms_for", "has_exception_handlers", "instruction_at"]


class BytecodeForms(NamedTuple):
    """How one Python version spells the instructions specfx looks for."""

    int_loads: Tuple[str, ...]  # load an int constant
    subscript: Tuple[str, str]  # (opname, argrepr or "") of `container[key]`
    unpack: str


def forms_for(version: Tuple[int, int]) -> BytecodeForms:
    """The instruction forms of Python ``version`` (major, minor).

    >>> forms_for((3, 14)).int_loads
    ('LOAD_CONST', 'LOAD_SMALL_INT')
    """
    if version >= (3, 14):  # small ints get their own load; subscripts became a BINARY_OP
        return BytecodeForms(("LOAD_CONST", "LOAD_SMALL_INT"), ("BINARY_OP", "[]"), "UNPACK_SEQUENCE")
    return BytecodeForms(("LOAD_CONST",), ("BINARY_SUBSCR", ""), "UNPACK_SEQUENCE")


FORMS = forms_for(sys.version_info[:2])
# Python >= 3.11 compiles try blocks to an exception table, which says statically which
# handler an instruction's exception reaches; before, SETUP_FINALLY pushed them at run time.
_EXCEPTION_TABLE = sys.version_info >= (3, 11)
_INSTRUCTIONS: Dict[types.CodeType, Tuple[List[dis.Instruction], Dict[int, int]]] = {}


def _instructions(code: types.CodeType) -> Tuple[List[dis.Instruction], Dict[int, int]]:
    """The code's instructions and offset -> position, cached per code object."""
    cached = _INSTRUCTIONS.get(code)
    if cached is None:
        listing = list(dis.get_instructions(code))
        cached = _INSTRUCTIONS[code] = (listing, {inst.offset: i for i, inst in enumerate(listing)})
    return cached


def constant_subscript(listing: List[dis.Instruction], index: int, forms: BytecodeForms = FORMS) -> Optional[int]:
    """``k`` when ``listing[index + 1:]`` is ``[k]`` with a constant int ``k``."""
    if index + 2 >= len(listing):
        return None
    load, subscript = listing[index + 1], listing[index + 2]
    opname, argrepr = forms.subscript
    if (load.opname in forms.int_loads and type(load.argval) is int and subscript.opname == opname
            and (not argrepr or subscript.argrepr == argrepr)):
        return load.argval
    return None


def constant_subscript_next(frame: types.FrameType) -> Optional[int]:
    """``k`` when the frame's next operation is ``[k]`` with a constant int (``x.shape[1]``)."""
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    return None if index is None else constant_subscript(listing, index)


def instruction_at(frame: types.FrameType) -> Optional[dis.Instruction]:
    """The instruction the frame is executing (e.g. ``UNPACK_SEQUENCE``)."""
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    return None if index is None else listing[index]


def unpack_count(frame: types.FrameType) -> Optional[int]:
    """The number of names when the frame is unpacking (``a, b = t``), else None."""
    instruction = instruction_at(frame)
    if instruction is not None and instruction.opname == FORMS.unpack:
        return int(instruction.argval)
    return None


# -- exception handlers around an instruction (model code's try/except) -------------------------


class Handler(NamedTuple):
    """A handler that an exception raised at an instruction reaches, innermost first.

    ``kind`` is ``"except"`` (``clauses`` holds each ``except`` clause's type expression as
    load instructions, ``()`` for a bare ``except:``, None when specfx cannot read it),
    ``"finally"`` or ``"with"`` (these re-raise, unless a context manager suppresses)."""

    kind: str
    line: int
    clauses: Tuple[Optional[Tuple[Tuple[str, Any], ...]], ...] = ()


# the instructions an ``except`` clause's type expression is made of (`RuntimeError`,
# `(TypeError, ValueError)`, `torch.jit.Error`)
_CLAUSE_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF",
                           "LOAD_ATTR", "LOAD_CONST", "BUILD_TUPLE"})
_HANDLERS: Dict[int, Tuple[types.CodeType, Dict[int, Tuple[Handler, ...]], list]] = {}


def _handler_at(listing: List[dis.Instruction], index: int) -> Handler:
    """Read the handler whose first instruction (``PUSH_EXC_INFO``) is ``listing[index]``."""
    # (3.11's positions: a handler's instructions carry its line, not always a starts_line)
    line = next((inst.positions.lineno for inst in listing[index + 1:]  # type: ignore[attr-defined]
                 if inst.positions is not None and inst.positions.lineno), 0)  # type: ignore[attr-defined]
    by_offset = {inst.offset: i for i, inst in enumerate(listing)}
    position = index + 1
    if position < len(listing) and listing[position].opname == "WITH_EXCEPT_START":
        return Handler("with", line)
    clauses: List[Optional[Tuple[Tuple[str, Any], ...]]] = []
    while position < len(listing):
        end = position
        while end < len(listing) and listing[end].opname in _CLAUSE_LOADS:
            end += 1
        if end < len(listing) and listing[end].opname in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH"):
            loads = tuple((inst.opname, inst.argval) for inst in listing[position:end])
            clauses.append(loads if listing[end].opname == "CHECK_EXC_MATCH" else None)
            jump = listing[end + 1] if end + 1 < len(listing) else None
            if jump is None or not isinstance(jump.argval, int) or jump.argval not in by_offset:
                break
            position = by_offset[jump.argval]  # the next clause, or the RERAISE when none matched
            continue
        if listing[position].opname == "POP_TOP" and (position == index + 1 or clauses):
            clauses.append(())  # a bare `except:`
        break
    return Handler("except", line, tuple(clauses)) if clauses else Handler("finally", line)


def _handlers_311(code: types.CodeType, offset: int, listing: List[dis.Instruction],
                  entries: list) -> Tuple[Handler, ...]:
    """Python >= 3.11: follow the exception table from ``offset``; a handler's own first
    instruction is covered by the entry that leads outwards (through cleanup blocks)."""
    by_offset = {inst.offset: i for i, inst in enumerate(listing)}
    found: List[Handler] = []
    seen = set()
    while offset not in seen:
        seen.add(offset)
        entry = next((e for e in entries if e.start <= offset < e.end), None)
        if entry is None:
            break
        offset = entry.target
        index = by_offset.get(offset)
        if index is not None and listing[index].opname == "PUSH_EXC_INFO":
            found.append(_handler_at(listing, index))
    return tuple(found)


def exception_handlers(code: types.CodeType, offset: int) -> Tuple[Handler, ...]:
    """The handlers an exception raised by the instruction at ``offset`` of ``code`` goes
    through, innermost first (cached per code object and offset). Before Python 3.11 (the
    block stack is only known at run time) this is always ``()``.

    >>> def f(x):
    ...     try:
    ...         return x.item()
    ...     except (TypeError, ValueError):
    ...         return 0
    >>> call = next(i for i in dis.get_instructions(f) if i.opname in ("CALL", "CALL_METHOD"))
    >>> [(h.kind, len(h.clauses)) for h in exception_handlers(f.__code__, call.offset)]
    [('except', 1)]
    """
    cached = _HANDLERS.get(id(code))
    if cached is None or cached[0] is not code:
        entries = list(getattr(dis.Bytecode(code), "exception_entries", ())) if _EXCEPTION_TABLE else []
        cached = _HANDLERS[id(code)] = (code, {}, entries)  # the code is kept: its id stays its own
    by_offset = cached[1]
    handlers = by_offset.get(offset)
    if handlers is None:
        handlers = by_offset[offset] = (
            _handlers_311(code, offset, _instructions(code)[0], cached[2]) if cached[2] else ())
    return handlers


def has_exception_handlers(code: types.CodeType) -> bool:
    """Whether any instruction of ``code`` is covered by a handler (cheap after the first call)."""
    cached = _HANDLERS.get(id(code))
    if cached is None or cached[0] is not code:
        exception_handlers(code, -1)
        cached = _HANDLERS[id(code)]
    return bool(cached[2])


def clause_types(clause: Tuple[Tuple[str, Any], ...], frame: types.FrameType) -> Optional[Tuple[type, ...]]:
    """The exception classes an ``except`` clause names, read in ``frame`` (None when the
    expression is not a plain name, attribute or tuple of them, or names no exception class)."""
    stack: List[Any] = []
    try:
        for opname, argval in clause:
            if opname == "LOAD_CONST":
                stack.append(argval)
            elif opname == "LOAD_ATTR":
                stack.append(getattr(stack.pop(), argval))
            elif opname == "BUILD_TUPLE":
                count = int(argval)
                items = tuple(stack[len(stack) - count:]) if count else ()
                del stack[len(stack) - count:]
                stack.append(items)
            elif opname == "LOAD_FAST":
                stack.append(frame.f_locals[argval])
            else:  # global, name, cell: the frame's locals, then globals, then builtins
                for scope in ((frame.f_locals, frame.f_globals) if opname != "LOAD_GLOBAL" else (frame.f_globals,)):
                    if argval in scope:
                        stack.append(scope[argval])
                        break
                else:
                    stack.append(frame.f_builtins[argval])
    except (KeyError, AttributeError, IndexError):
        return None
    if len(stack) != 1:
        return None
    caught = stack[0] if isinstance(stack[0], tuple) else (stack[0],)
    if not caught or not all(isinstance(t, type) and issubclass(t, BaseException) for t in caught):
        return None
    return caught

