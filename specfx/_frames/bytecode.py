"""What specfx reads from the caller's bytecode, with every Python-version difference
in one table.

Three questions are answered from the instruction being executed: is a ``.shape``
read followed by a constant subscript (``x.shape[1]`` reads one dimension), is
an iteration an unpacking into a fixed number of names (``a, b = t``), and which
callable a call instruction calls (``isinstance(x, torch.Tensor)`` or a torch function).
"""

from __future__ import annotations

import bisect
import dis
import sys
import types
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

__all__ = ["FORMS", "Attribute", "BytecodeForms", "CallSite", "Handler", "MATCH_CLASS", "NOT_A_CALL", "Name",
           "attribute_read_line", "call_site_at", "call_sites", "clause_types", "constant_subscript_next",
           "exception_handlers", "forms_for", "has_exception_handlers", "instruction_at", "simulate", "store_line",
           "unpack_discards", "unpacked_next"]


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


def constant_subscript_next(frame: Optional[types.FrameType]) -> Optional[int]:
    """``k`` when the frame's next operation is ``[k]`` with a constant int (``x.shape[1]``)."""
    if frame is None:
        return None
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    return None if index is None else constant_subscript(listing, index)


def unpacked_next(frame: types.FrameType) -> bool:
    """Whether the value the frame's current instruction makes is unpacked right away
    (``n, c, h, w = x.shape``, ``b, t = x.size()``)."""
    listing, _ = _instructions(frame.f_code)
    index = bisect.bisect_right([inst.offset for inst in listing], frame.f_lasti) - 1
    for inst in listing[index + 1:index + 3]:
        if inst.opname == FORMS.unpack:
            return True
        if inst.opname not in ("CALL", "PRECALL"):
            return False
    return False


def instruction_at(frame: types.FrameType) -> Optional[dis.Instruction]:
    """The instruction the frame is executing (e.g. ``UNPACK_SEQUENCE``)."""
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    return None if index is None else listing[index]


def unpack_count(frame: Optional[types.FrameType]) -> Optional[int]:
    """The number of names when the frame is unpacking (``a, b = t``), else None."""
    if frame is None:
        return None
    instruction = instruction_at(frame)
    if instruction is not None and instruction.opname == FORMS.unpack:
        return int(instruction.argval)
    return None


# the store forms that name each unpacked value once; 3.13 pairs two stores in one instruction
_PAIRED_LOCAL_STORES = frozenset({"STORE_FAST_STORE_FAST"})
# a call of these reads every local by name
_LOCALS_READERS = frozenset({"locals", "vars", "eval", "exec"})


def unpack_discards(frame: Optional[types.FrameType]) -> frozenset:
    """The positions of an unpacking (``out, _ = attention(x, x, x)``) whose value nothing reads:
    stored to a local that the function never loads (nor a closure, nor ``locals()``), or
    popped. Conservative: a position stored any other way (an attribute, an item, a nested
    unpacking) counts as read, and so does every one after it.

    >>> import sys
    >>> class Pairs:
    ...     def __iter__(self):  # called by the unpacking: its frame is one up
    ...         return iter((unpack_discards(sys._getframe(1)), None))
    >>> def f():
    ...     kept, _ = Pairs()
    ...     return kept
    >>> sorted(f())
    [1]
    """
    if frame is None:
        return frozenset()
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    if index is None or listing[index].opname != FORMS.unpack:
        return frozenset()
    code = frame.f_code
    if _LOCALS_READERS & set(code.co_names):
        return frozenset()
    read = {name for inst in _split_paired_loads(listing) if inst.opname in _LOCAL_LOADS
            for name in (inst.argval if isinstance(inst.argval, tuple) else (inst.argval,))}
    read |= set(code.co_cellvars)
    targets: List[Optional[str]] = []  # per position: the local it goes to ("" popped), None: read
    for inst in listing[index + 1:]:
        if len(targets) >= int(listing[index].argval):
            break
        if inst.opname == "STORE_FAST":
            targets.append(inst.argval)
        elif inst.opname in _PAIRED_LOCAL_STORES and isinstance(inst.argval, tuple):
            targets += list(inst.argval)
        elif inst.opname == "POP_TOP":
            targets.append("")
        else:
            break
    return frozenset(i for i, name in enumerate(targets) if name is not None and name not in read)


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



# -- `type(x) is T`: calls of the builtin type() compared right away --------------------------


class TypeCheck(NamedTuple):
    """A ``type(<name>[.attr...])`` call whose result is compared (``is``, ``==``, ``in``,
    also through ``.__name__``), and the offsets of the instructions it dominates (every
    path from the function's entry to them runs it)."""

    offset: int
    line: int
    argument: Tuple[str, ...]  # local name, then attributes
    dominated: frozenset
    reassigned: bool  # the local is stored to after the call: its value then may not be the one type() got
    stored: bool  # the local is stored to anywhere (a parameter's value at entry may not be the one)
    always: bool  # it runs on every path that returns (so checking the arguments at entry is exact)
    kind: str = "type"  # "type": type(x) compared; "identity": x is/is not <not None>, or id(x);
    # "rng": <name>[.attr...].manual_seed(...) and the other methods that seed or set a generator's state
    # (the argument ends with the method's name)
    # an identity test's other operand: ("local" | "global" | "const", name or constant, attributes...);
    # () when it is not one of these simple forms
    other: Tuple[Any, ...] = ()


# Instructions after which control does not fall through, and loads of a frame's local.
_ENDS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
                   "JUMP_ABSOLUTE", "JUMP", "JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT"})
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_DEREF", "LOAD_CLASSDEREF",
                          "LOAD_FAST_AND_CLEAR", "LOAD_CLOSURE"})
_COMPARISONS = frozenset({"IS_OP", "COMPARE_OP", "CONTAINS_OP"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
# torch.Generator's methods that seed it, set its state or read the state a graph cannot replay
GENERATOR_CONTROL = frozenset({"manual_seed", "seed", "set_state", "get_state", "initial_seed",
                               "graphsafe_set_state", "graphsafe_get_state", "clone_state"})
_TYPE_CHECKS: Dict[int, Tuple[types.CodeType, Tuple[TypeCheck, ...]]] = {}


def _dominators(listing: List[dis.Instruction]) -> Dict[int, frozenset]:
    """For each instruction offset, the offsets of the instructions that dominate it
    (normal control flow only; exception handlers are reached from nowhere)."""
    leaders = {0} | {inst.argval for inst in listing if inst.opcode in _JUMPS and isinstance(inst.argval, int)}
    leaders |= {listing[i + 1].offset for i, inst in enumerate(listing[:-1])
                if inst.opcode in _JUMPS or inst.opname in _ENDS}
    blocks: List[List[dis.Instruction]] = []
    for inst in listing:
        if inst.offset in leaders or not blocks:
            blocks.append([])
        blocks[-1].append(inst)
    start = {block[0].offset: i for i, block in enumerate(blocks)}
    successors: List[List[int]] = []
    for i, block in enumerate(blocks):
        last = block[-1]
        following = [] if last.opname in _ENDS or i + 1 == len(blocks) else [i + 1]
        if last.opcode in _JUMPS and last.argval in start:
            following.append(start[last.argval])
        successors.append(following)
    everything = frozenset(range(len(blocks)))
    dom: List[frozenset] = [frozenset({0})] + [everything] * (len(blocks) - 1)
    predecessors: List[List[int]] = [[] for _ in blocks]
    for i, following in enumerate(successors):
        for j in following:
            predecessors[j].append(i)
    changed = True
    while changed:
        changed = False
        for i in range(1, len(blocks)):
            preds = [dom[p] for p in predecessors[i]]
            new = (frozenset.intersection(*preds) if preds else everything) | {i}
            if new != dom[i]:
                dom[i], changed = new, True
    result: Dict[int, frozenset] = {}
    for i, block in enumerate(blocks):
        if not predecessors[i] and i:  # unreachable by normal flow: dominated by nothing known
            continue
        before = frozenset(inst.offset for d in dom[i] if d != i for inst in blocks[d])
        for k, inst in enumerate(block):
            result[inst.offset] = before | {b.offset for b in block[:k + 1]}
    return result


_PLAIN_LOADS = _LOCAL_LOADS | {"LOAD_CONST", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_SMALL_INT"}


def _opnames(code: types.CodeType) -> frozenset:
    return frozenset(dis.opname[op] for op in code.co_code[::2])


def _split_paired_loads(listing: List[dis.Instruction]) -> List[dis.Instruction]:
    """``listing`` with each paired local load (3.13's ``LOAD_FAST_LOAD_FAST (x, k)``, which
    pushes two operands at once) written as the two ``LOAD_FAST`` it stands for (same offset)."""
    if not any(inst.opname in _PAIRED_LOCAL_LOADS for inst in listing):
        return listing
    split: List[dis.Instruction] = []
    for inst in listing:
        if inst.opname in _PAIRED_LOCAL_LOADS and isinstance(inst.argval, tuple) and len(inst.argval) == 2:
            split += [inst._replace(opname="LOAD_FAST", argval=name) for name in inst.argval]
        else:
            split.append(inst)
    return split


def _operand_start(listing: List[dis.Instruction], end: int) -> Optional[int]:
    """The index where the operand that ends right before ``listing[end]`` starts, for the
    simple forms ``name``, ``name.attr...``, a constant or a global (None otherwise)."""
    k = end - 1
    while k >= 0 and listing[k].opname == "LOAD_ATTR":
        k -= 1
    if k >= 0 and listing[k].opname in _PLAIN_LOADS:
        return k
    return None


def _operand_form(operand: Sequence[dis.Instruction]) -> Tuple[Any, ...]:
    """An identity test's other operand as :attr:`TypeCheck.other` spells it."""
    first = operand[0]
    attributes = tuple(a.argval for a in operand[1:])
    if first.opname in _LOCAL_LOADS:
        return ("local", first.argval, *attributes)
    if first.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        return ("global", first.argval, *attributes)
    if first.opname in ("LOAD_CONST", "LOAD_SMALL_INT"):
        return ("const", first.argval, *attributes)
    return ()


def type_checks(code: types.CodeType) -> Tuple[TypeCheck, ...]:
    """The compared ``type(x)`` calls of ``code`` (cached per code object).

    >>> import torch
    >>> def f(x):
    ...     return x * 2 if type(x) is torch.Tensor else x
    >>> [c.argument for c in type_checks(f.__code__)]
    [('x',)]
    """
    cached = _TYPE_CHECKS.get(id(code))
    if cached is not None and cached[0] is code:
        return cached[1]
    found: List[TypeCheck] = []
    listing: List[dis.Instruction] = []
    dominators: Optional[Dict[int, frozenset]] = None
    if "type" in code.co_names or "id" in code.co_names:
        listing = _instructions(code)[0]
        for i, inst in enumerate(listing):
            if not (inst.opname in ("LOAD_GLOBAL", "LOAD_NAME") and inst.argval in ("type", "id")):
                continue
            kind = "type" if inst.argval == "type" else "identity"
            j = i + 1
            if j >= len(listing) or listing[j].opname not in _LOCAL_LOADS:
                continue
            argument = [listing[j].argval]
            j += 1
            while j < len(listing) and listing[j].opname == "LOAD_ATTR":
                argument.append(listing[j].argval)
                j += 1
            while j < len(listing) and listing[j].opname in ("PRECALL", "CACHE"):
                j += 1
            if j >= len(listing) or listing[j].opname not in ("CALL", "CALL_FUNCTION") or listing[j].arg != 1:
                continue
            after = listing[j + 1:j + 8]
            compared = next((k for k, a in enumerate(after) if a.opname in _COMPARISONS), None)
            if kind == "identity":  # id(x), however it is used (a key, compared, formatted)
                compared = 0
            elif compared is None or any(a.opname in ("CALL", "PRECALL", "STORE_FAST") or a.opcode in _JUMPS
                                         for a in after[:compared]):
                continue
            if dominators is None:
                dominators = _dominators(listing)
            call = listing[j].offset
            dominated = frozenset(o for o, doms in dominators.items() if call in doms and o != call)
            stores = [a.offset for a in listing
                      if a.opname in ("STORE_FAST", "DELETE_FAST") and a.argval == argument[0]]
            reassigned, stored = any(o > call for o in stores), bool(stores)
            returns = [a.offset for a in listing if a.opname in ("RETURN_VALUE", "RETURN_CONST")]
            always = bool(returns) and all(r in dominated for r in returns)
            line = next((a.positions.lineno for a in listing[i:j + 1]  # type: ignore[attr-defined]
                         if getattr(a, "positions", None) is not None and a.positions.lineno), 0)  # type: ignore[attr-defined]
            found.append(TypeCheck(call, line, tuple(argument), dominated, reassigned, stored, always, kind))
    if not GENERATOR_CONTROL.isdisjoint(code.co_names):
        listing = listing or _instructions(code)[0]
        dominators = dominators or _dominators(listing)
        found += _generator_controls(listing, dominators)
    if "IS_OP" in _opnames(code):
        listing = listing or _instructions(code)[0]
        loads = _split_paired_loads(listing)
        for k, inst in enumerate(loads):
            if inst.opname != "IS_OP":
                continue
            right_start = _operand_start(loads, k)
            left_start = _operand_start(loads, right_start) if right_start is not None else None
            if left_start is None or right_start is None:
                continue
            operands = (loads[left_start:right_start], loads[right_start:k])
            if any(o[0].opname == "LOAD_CONST" and o[0].argval is None and len(o) == 1 for o in operands):
                continue  # `x is None`: answered truly (None stays None, guarded at entry)
            if dominators is None:
                dominators = _dominators(listing)
            dominated = frozenset(o for o, doms in dominators.items() if inst.offset in doms and o != inst.offset)
            line = next((a.positions.lineno for a in loads[left_start:k + 1]  # type: ignore[attr-defined]
                         if getattr(a, "positions", None) is not None and a.positions.lineno), 0)  # type: ignore[attr-defined]
            for operand, other in (operands, operands[::-1]):
                if operand[0].opname not in _LOCAL_LOADS:
                    continue
                name = operand[0].argval
                stores = [a.offset for a in listing if a.opname in ("STORE_FAST", "DELETE_FAST") and a.argval == name]
                returns = [a.offset for a in listing if a.opname in ("RETURN_VALUE", "RETURN_CONST")]
                found.append(TypeCheck(inst.offset, line, (name, *(a.argval for a in operand[1:])), dominated,
                                       any(o > inst.offset for o in stores), bool(stores),
                                       bool(returns) and all(r in dominated for r in returns), "identity",
                                       _operand_form(other)))
    _TYPE_CHECKS[id(code)] = (code, tuple(found))  # the code is kept: its id stays its own
    return tuple(found)


def _generator_controls(listing: List[dis.Instruction], dominators: Dict[int, frozenset]) -> List[TypeCheck]:
    """The ``<local>[.attr...].manual_seed`` (and other :data:`GENERATOR_CONTROL`) method reads of
    a listing: on a ``torch.Generator`` they seed it or set its state, which a graph cannot replay."""
    found: List[TypeCheck] = []
    returns = [a.offset for a in listing if a.opname in ("RETURN_VALUE", "RETURN_CONST")]
    for k, inst in enumerate(listing):
        if inst.opname not in ("LOAD_ATTR", "LOAD_METHOD") or inst.argval not in GENERATOR_CONTROL:
            continue
        start = _operand_start(listing, k)
        if start is None or listing[start].opname not in _LOCAL_LOADS | {"LOAD_GLOBAL", "LOAD_NAME"}:
            continue
        name = listing[start].argval
        dominated = frozenset(o for o, doms in dominators.items() if inst.offset in doms and o != inst.offset)
        stores = [a.offset for a in listing if a.opname in ("STORE_FAST", "DELETE_FAST") and a.argval == name]
        line = next((a.positions.lineno for a in listing[start:k + 1]  # type: ignore[attr-defined]
                     if getattr(a, "positions", None) is not None and a.positions.lineno), 0)  # type: ignore[attr-defined]
        found.append(TypeCheck(inst.offset, line, (name, *(a.argval for a in listing[start + 1:k + 1])), dominated,
                               any(o > inst.offset for o in stores), bool(stores),
                               bool(returns) and all(r in dominated for r in returns), "rng"))
    return found


# -- which callable a call instruction calls -------------------------------------------------
#
# ``isinstance(x, torch.Tensor)`` in model code must see the traced tensor, while torch's C++
# checks (THPVariable_Check, e.g. in `torch.add(x, y)`) reach the same `__class__` lookup and must
# see the Proxy. Both happen while the user's frame executes a call instruction; what tells them
# apart is the callable, which is on the frame's value stack, out of Python's reach. It is found
# by simulating the stack over the code (dis.stack_effect, each path of the control-flow graph):
# each stack entry is described by the instruction that produced it, as far as a name or an
# attribute chain tells (the callable is then looked up again at run time, in the frame).


class Name(NamedTuple):
    """A value loaded by name: ``scope`` is "global" (globals, then builtins), "name"
    (locals, globals, builtins: module and class bodies) or "local" (the frame's locals)."""

    scope: str
    name: str


class Attribute(NamedTuple):
    """``base.name``: the callable of ``torch.is_tensor(x)`` or ``obj.method(x)``."""

    base: "Described"
    name: str


class _Unknown(NamedTuple):
    """A value computed by other code (a call, a subscript, an expression)."""


class _Null(NamedTuple):
    """The NULL that Python >= 3.11 pushes beside a callable that is not a method."""


Described = object  # Name | Attribute | _Unknown | _Null
UNKNOWN, NULL = _Unknown(), _Null()


class CallSite(NamedTuple):
    """What the instruction a frame executes calls: ``kind`` is "call", "match" (``case
    torch.Tensor():``, which checks the class as isinstance does) or "other"; ``callable``
    describes the called value (None: computed, unknown); ``positional`` is the number of
    positional arguments (None: unpacked ``*args``; -1: keyword arguments too)."""

    kind: str
    callable: Optional[Described] = None
    positional: Optional[int] = -1


MATCH_CLASS, NOT_A_CALL = CallSite("match"), CallSite("other")


class CallForms(NamedTuple):
    """How one Python version spells calls: ``calls`` maps a call opname to (the number of
    stack entries below the arguments that hold the callable: 1, or 2 for the NULL/self
    pair, and whether the call may run at the next instruction too); ``keywords``: an
    instruction before a call that names keyword arguments (the call is not isinstance)."""

    calls: Dict[str, Tuple[int, bool]]
    keywords: Tuple[str, ...]
    method_loads: Tuple[str, ...]  # push the pair (callable, self) when the low bit asks (or always)
    method_bit: Dict[str, bool]  # opname -> whether the low bit of the argument selects the pair form


def call_forms_for(version: Tuple[int, int]) -> CallForms:
    """The call instructions of Python ``version`` (major, minor).

    >>> sorted(call_forms_for((3, 12)).calls)
    ['CALL', 'CALL_FUNCTION_EX']
    """
    if version >= (3, 13):  # keyword calls have their own instruction; CALL's pair is (callable, self|NULL)
        return CallForms({"CALL": (2, False), "CALL_KW": (2, False), "CALL_FUNCTION_EX": (2, False)}, (),
                         ("LOAD_ATTR",), {"LOAD_ATTR": True, "LOAD_GLOBAL": True})
    if version >= (3, 12):  # PRECALL is gone; LOAD_METHOD folded into LOAD_ATTR's low bit
        return CallForms({"CALL": (2, False), "CALL_FUNCTION_EX": (2, False)}, ("KW_NAMES",),
                         ("LOAD_ATTR",), {"LOAD_ATTR": True, "LOAD_GLOBAL": True})
    if version >= (3, 11):  # PRECALL n; CALL n: the call runs (f_lasti) at CALL
        return CallForms({"PRECALL": (2, True), "CALL_FUNCTION_EX": (2, False)}, ("KW_NAMES",),
                         ("LOAD_METHOD",), {"LOAD_METHOD": False, "LOAD_GLOBAL": True})
    return CallForms({"CALL_FUNCTION": (1, False), "CALL_METHOD": (2, False), "CALL_FUNCTION_KW": (1, False),
                      "CALL_FUNCTION_EX": (1, False)}, (), ("LOAD_METHOD",), {"LOAD_METHOD": False})


CALL_FORMS = call_forms_for(sys.version_info[:2])

# Instructions that leave the stack alone (net effect 0, nothing replaced).
_NEUTRAL = frozenset({"NOP", "RESUME", "CACHE", "EXTENDED_ARG", "NOT_TAKEN", "KW_NAMES", "MAKE_CELL",
                      "COPY_FREE_VARS", "GEN_START", "ENTER_EXECUTOR", "CALL", "SETUP_ANNOTATIONS"})
# Prefixes of instructions that only pop (or only push, for jumps into handlers).
_POPPING = ("STORE_", "POP_", "DELETE_", "RETURN_", "RAISE_", "RERAISE", "JUMP", "END_FOR", "PRINT_EXPR",
            "IMPORT_STAR", "LIST_APPEND", "SET_ADD", "MAP_ADD", "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE",
            "DICT_MERGE", "SETUP_")
_CONSUMING_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "LOAD_SPECIAL", "LOAD_FROM_DICT_OR_DEREF",
                              "LOAD_FROM_DICT_OR_GLOBALS", "LOAD_SUPER_METHOD", "LOAD_ZERO_SUPER_ATTR",
                              "LOAD_ZERO_SUPER_METHOD"})
_PAIRED_LOCAL_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})


class _Unanalyzable(Exception):
    """The code has a shape the simulation does not follow (the sites stay unknown)."""


def _effect(inst: dis.Instruction, jump: bool) -> int:
    arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
    return dis.stack_effect(inst.opcode, arg, jump=jump)


def _step(inst: dis.Instruction, stack: List[Described], effect: int, forms: CallForms, jump: bool = False) -> None:
    """Apply ``inst`` (with net ``effect``; ``jump``: on its jump branch) to the simulated ``stack``."""
    name = inst.opname
    if jump:  # a jump pops its operand (a loop's exhausted iterator), or pushes a handler's entries
        if -effect > len(stack):
            raise _Unanalyzable(name)
        del stack[len(stack) + min(effect, 0):]
        stack.extend([UNKNOWN] * max(effect, 0))
        return
    if name in ("COPY", "DUP_TOP", "DUP_TOP_TWO", "SWAP", "ROT_TWO", "ROT_THREE", "ROT_FOUR", "ROT_N"):
        n = inst.arg or 0
        if name == "COPY":
            stack.append(stack[-n])
        elif name == "DUP_TOP":
            stack.append(stack[-1])
        elif name == "DUP_TOP_TWO":
            stack.extend(stack[-2:])
        elif name == "SWAP":
            stack[-1], stack[-n] = stack[-n], stack[-1]
        else:
            n = {"ROT_TWO": 2, "ROT_THREE": 3, "ROT_FOUR": 4}.get(name, n)
            stack[-n:] = [stack[-1], *stack[-n:-1]]
        return
    if name == "PUSH_NULL":
        stack.append(NULL)
        return
    if name == "LOAD_ASSERTION_ERROR":  # (the callable of `assert cond, message`)
        stack.append(Name("global", "AssertionError"))
        return
    if name == "LOAD_GLOBAL" or name == "LOAD_NAME" or name in _LOCAL_LOADS:
        scope = "global" if name == "LOAD_GLOBAL" else "name" if name == "LOAD_NAME" else "local"
        loaded = Name(scope, str(inst.argval))
        if effect == 2:  # (3.11+) with the NULL that a call of it needs; either order serves
            stack.append(NULL)
        stack.append(loaded)
        return
    if name in _PAIRED_LOCAL_LOADS:
        stack.extend(Name("local", str(n)) for n in inst.argval)
        return
    if name in forms.method_loads or (name == "LOAD_ATTR" and not forms.method_bit.get(name, False)):
        stack[-1] = Attribute(stack[-1], str(inst.argval))
        if effect == 1:  # the (callable, self) pair: the callable below
            stack.append(UNKNOWN)
        return
    if name in _NEUTRAL and effect == 0:
        return
    if name.startswith("BUILD_"):
        pops, pushes = 1 - effect, 1
    elif name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
        pops, pushes = 1, effect + 1
    elif name == "RETURN_GENERATOR":  # (3.11+) resumed with the value the next POP_TOP drops
        pops, pushes = 0, 1
    elif name.startswith("LOAD_") and name not in _CONSUMING_LOADS:
        pops, pushes = 0, effect
    elif name.startswith(_POPPING):
        pops, pushes = max(-effect, 0), max(effect, 0)
    elif effect < 0:
        pops, pushes = 1 - effect, 1
    else:
        pops, pushes = 1, effect + 1
    if pops > len(stack) or pushes < 0:
        raise _Unanalyzable(name)
    del stack[len(stack) - pops:]
    stack.extend([UNKNOWN] * pushes)


def _site(inst: dis.Instruction, stack: List[Described], keywords: bool, forms: CallForms) -> Optional[CallSite]:
    """The call site of ``inst`` on ``stack`` (before it runs), or None if it is no call."""
    form = forms.calls.get(inst.opname)
    if form is None:
        return MATCH_CLASS if inst.opname == "MATCH_CLASS" else None
    slots, _ = form
    positional: Optional[int]
    if inst.opname == "CALL_FUNCTION_EX":
        region = 1 - _effect(inst, False)  # callable slot(s), the argument tuple, the keyword dict
        positional = None
    else:
        argc = inst.arg or 0
        named = inst.opname in ("CALL_KW", "CALL_FUNCTION_KW")
        region = argc + slots + (1 if named else 0)
        positional = -1 if named or keywords else argc
    if region > len(stack):
        raise _Unanalyzable(inst.opname)
    lowest = stack[len(stack) - region:][:slots]
    callable_ = next((entry for entry in lowest if entry is not NULL), UNKNOWN)
    return CallSite("call", None if callable_ is UNKNOWN else callable_, positional)


def _handler_entries(code: types.CodeType) -> List[Tuple[int, int]]:
    """(handler offset, stack depth at its start) for Python >= 3.11's exception table."""
    entries = getattr(dis.Bytecode(code), "exception_entries", ())
    return [(entry.target, entry.depth + (1 if entry.lasti else 0) + 1) for entry in entries]


def call_sites(code: types.CodeType, forms: CallForms = CALL_FORMS) -> Dict[int, CallSite]:
    """Every call instruction of ``code`` (by the offset at which it runs) and what it calls.

    >>> def f(x):
    ...     return isinstance(x, int)
    >>> {site.callable for site in call_sites(f.__code__).values()}
    {Name(scope='global', name='isinstance')}
    """
    listing, position = _instructions(code)
    sites: Dict[int, CallSite] = {}

    def visit(index: int, inst: dis.Instruction, stack: List[Described], keywords: bool) -> None:
        site = _site(inst, stack, keywords, forms)
        if site is not None:
            sites[inst.offset] = site
            if forms.calls.get(inst.opname, (0, False))[1] and index + 1 < len(listing):
                # (3.11) the call runs at CALL, or at PRECALL once specialized for a builtin
                sites[listing[index + 1].offset] = site

    simulate(code, visit, forms)
    return sites


def simulate(code: types.CodeType, visit: Any, forms: CallForms = CALL_FORMS) -> None:
    """Simulate the value stack over every path of ``code``: ``visit(index, instruction, stack,
    keywords)`` sees each instruction with the stack before it (``keywords``: the instruction
    before named keyword arguments). Raises ``_Unanalyzable`` for code it does not follow."""
    listing, position = _instructions(code)
    stacks: Dict[int, List[Described]] = {0: []}
    for target, depth in _handler_entries(code):
        stacks.setdefault(target, [UNKNOWN] * depth)
    work = sorted(stacks)
    while work:
        index = position[work.pop()]
        stack = list(stacks[listing[index].offset])
        keywords = False
        while index < len(listing):
            inst = listing[index]
            visit(index, inst, stack, keywords)
            keywords = inst.opname in forms.keywords
            if inst.opcode in _JUMPS:
                jumped = list(stack)
                _step(inst, jumped, _effect(inst, True), forms, jump=True)
                if _merge(stacks, int(inst.argval), jumped):
                    work.append(int(inst.argval))
            if inst.opname in _ENDS:
                break
            _step(inst, stack, _effect(inst, False), forms)
            index += 1
            if index < len(listing):
                following = listing[index].offset
                if following in stacks:  # a join point: continue only if it learned something
                    if not _merge(stacks, following, stack):
                        break
                    stack = list(stacks[following])
                elif listing[index].is_jump_target:
                    stacks[following] = list(stack)


def _merge(stacks: Dict[int, List[Described]], offset: int, stack: List[Described]) -> bool:
    """Record ``stack`` at ``offset``; True if that changed what is known there."""
    known = stacks.get(offset)
    if known is None:
        stacks[offset] = list(stack)
        return True
    if len(known) != len(stack):
        raise _Unanalyzable(f"stack depth {len(known)} and {len(stack)} at offset {offset}")
    merged = [a if a == b else UNKNOWN for a, b in zip(known, stack)]
    if merged == known:
        return False
    stacks[offset] = merged
    return True


_SITES: Dict[types.CodeType, Optional[Tuple[Dict[int, CallSite], List[int]]]] = {}


def call_site_at(frame: types.FrameType) -> Optional[CallSite]:
    """The call the frame is executing (:data:`NOT_A_CALL` for other instructions; None
    for code the simulation does not follow); cached per code object."""
    code = frame.f_code
    try:
        cached = _SITES[code]
    except KeyError:
        try:
            cached = (call_sites(code), [inst.offset for inst in _instructions(code)[0]])
        except (_Unanalyzable, ValueError, IndexError, KeyError):
            cached = None
        _SITES[code] = cached
    if cached is None:
        return None
    sites, offsets = cached
    site = sites.get(frame.f_lasti)
    if site is None:  # (3.11+) a frame that called Python code points into its call's inline cache
        site = sites.get(offsets[bisect.bisect_right(offsets, frame.f_lasti) - 1], NOT_A_CALL)
    return site


def store_line(code: types.CodeType, globals_stored: "frozenset[str]", closure: bool,
               attributes: "frozenset[str]" = frozenset()) -> Optional[int]:
    """The line of ``code``'s first store to one of the globals ``globals_stored`` (``global n;
    n += 1``), with ``closure`` to a variable of its closure (``nonlocal n``), or to one of the
    ``attributes`` of an object (``self.count = ...``); None if there is none."""
    for inst in dis.get_instructions(code):
        if ((inst.opname == "STORE_GLOBAL" and inst.argval in globals_stored)
                or (closure and inst.opname == "STORE_DEREF" and inst.argval in code.co_freevars)
                or (inst.opname == "STORE_ATTR" and inst.argval in attributes)):
            positions = getattr(inst, "positions", None)
            line = positions.lineno if positions is not None else getattr(inst, "starts_line", None)
            return int(line or code.co_firstlineno)
    return None


def attribute_read_line(code: types.CodeType, names: "frozenset[str]") -> Optional[int]:
    """The line of ``code``'s first read of one of the attributes ``names`` of an object
    (``self.history.append(x)``, ``self.register_buffer(...)``); None if there is none."""
    for inst in dis.get_instructions(code):
        if inst.opname in ("LOAD_ATTR", "LOAD_METHOD") and inst.argval in names:
            positions = getattr(inst, "positions", None)
            line = positions.lineno if positions is not None else getattr(inst, "starts_line", None)
            return int(line or code.co_firstlineno)
    return None
