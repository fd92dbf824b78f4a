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
from typing import Dict, List, NamedTuple, Optional, Tuple

__all__ = ["BytecodeForms", "FORMS", "constant_subscript_next", "forms_for", "instruction_at"]


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
