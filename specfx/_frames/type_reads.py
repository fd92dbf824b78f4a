"""Who asks a traced value for its class.

``isinstance(x, torch.Tensor)`` in model code must answer as the example tensor does
(and be guarded), while torch keeps seeing a ``torch.fx.Proxy``: its C++ checks
(``THPVariable_Check``, e.g. in ``torch.add(x, y)`` or ``t[x]``) would take a proxy
answered as a tensor for one and crash. CPython's ``isinstance`` asks the object's
``__class__`` when the type check fails, and so does torch's check; a
:class:`~specfx._capture.values.ValueProxy` answers its ``__class__`` through
:func:`isinstance_asker`, which looks at the Python frame the lookup happens in:

- a user frame (:func:`~specfx._frames.source.is_user_file`) executing a call whose callable
  is the builtin ``isinstance`` (found from the bytecode, :func:`~specfx._frames.bytecode.call_site_at`,
  and looked up again in the frame), or a ``case torch.Tensor():`` pattern: the value's class;
- frames of functions that only relay an instance check (``torch.is_tensor``, the
  ``__instancecheck__`` of ``nn.Parameter``/``Buffer``, ABCs and protocols) are
  looked through: the user's call must then be of that function;
- anything else (torch, torch.fx, another call in user code): the proxy's own class;
- a user call whose callable the bytecode does not tell (``fns[0](x, T)``): no guess,
  :class:`CannotTell` (the proxy turns it into a ``SpecializationError`` at that line).

Nothing global is replaced: other threads, and every object that is not a proxy,
meet the builtin ``isinstance`` untouched.
"""

from __future__ import annotations

import abc
import builtins
import inspect
import types
import typing
from typing import Any, Dict, Optional, Tuple

import torch

from .bytecode import Attribute, Name, call_site_at, instruction_at
from .source import is_user_file

__all__ = ["CannotTell", "isinstance_asker"]

_ABSENT: Any = object()
_ISINSTANCE = builtins.isinstance
_IS_TENSOR = torch.is_tensor
# What the user's call must have called for each relaying function, and how many positional
# arguments it takes (None: the call unpacked *args).
_EXPECTED: Dict[Any, Tuple[Optional[int], ...]] = {_ISINSTANCE: (2, None), _IS_TENSOR: (1, None)}


class CannotTell(Exception):
    """A call in user code reads a proxy's class, and its callable is computed (a
    subscript, a call result, a property): it may be ``isinstance``, or a torch function
    that must see a Proxy. ``frame`` is that user frame."""

    def __init__(self, frame: types.FrameType) -> None:
        super().__init__(frame.f_code.co_filename, frame.f_lineno)
        self.frame = frame


def _relays() -> Dict[types.CodeType, Any]:
    """Code of functions that only relay an instance check -> what the user must have called."""
    relays: Dict[types.CodeType, Any] = {}
    owners = [abc.ABCMeta, getattr(typing, "_ProtocolMeta", None), getattr(torch.autograd.variable, "VariableMeta", None)]
    owners += [getattr(torch.nn.parameter, name, None) for name in ("_ParameterMeta", "_BufferMeta")]
    for owner in owners:
        code = getattr(vars(owner).get("__instancecheck__") if owner is not None else None, "__code__", None)
        if code is not None:
            relays[code] = _ISINSTANCE
    code = getattr(_IS_TENSOR, "__code__", None)  # `return isinstance(obj, torch.Tensor)`
    if code is not None:
        relays[code] = _IS_TENSOR
    return relays


_RELAYS = _relays()
_USER_CODE: Dict[types.CodeType, bool] = {}


def isinstance_asker(frame: types.FrameType) -> Optional[types.FrameType]:
    """The user frame whose ``isinstance()`` (or ``torch.is_tensor()``) call reads a
    proxy's class in ``frame`` (the frame the lookup happens in), or None when the
    read comes from anywhere else. Raises :class:`CannotTell`.

    >>> import sys
    >>> def asker():
    ...     return isinstance_asker(sys._getframe(0))  # (a call, but not of isinstance)
    >>> asker() is None
    True
    """
    accepted = _ISINSTANCE
    relay = _RELAYS.get(frame.f_code)
    while relay is not None:  # the outermost relay is what the user called
        accepted = relay
        back = frame.f_back
        if back is None:
            return None
        frame = back
        relay = _RELAYS.get(frame.f_code)
    code = frame.f_code
    user = _USER_CODE.get(code)
    if user is None:
        user = _USER_CODE[code] = is_user_file(code.co_filename)
    if not user:
        return None
    if accepted is _ISINSTANCE:
        instruction = instruction_at(frame)
        if instruction is not None and instruction.opname.startswith("LOAD_ATTR") and instruction.argval == "__class__":
            return frame  # `x.__class__ is torch.Tensor`: model code reading the class itself
    site = call_site_at(frame)
    if site is None:
        raise CannotTell(frame)
    if site.kind == "match":  # `case torch.Tensor():` checks the class as isinstance does
        return frame if accepted is _ISINSTANCE else None
    if site.kind != "call" or site.positional not in _EXPECTED[accepted]:
        return None
    if site.callable is None:
        raise CannotTell(frame)
    called = _resolve(site.callable, frame)
    if called is _ABSENT:
        raise CannotTell(frame)
    return frame if called is accepted else None


def _resolve(described: Any, frame: types.FrameType) -> Any:
    """The value ``described`` (a name or an attribute chain) has in ``frame`` now,
    read without running any code (``_ABSENT`` when that is impossible)."""
    if type(described) is Name:
        name = described.name
        if described.scope == "local":
            return frame.f_locals.get(name, _ABSENT)
        if described.scope == "name" and name in frame.f_locals:
            return frame.f_locals[name]
        found = frame.f_globals.get(name, _ABSENT)
        return frame.f_builtins.get(name, _ABSENT) if found is _ABSENT else found
    if type(described) is Attribute:
        base = _resolve(described.base, frame)
        return _ABSENT if base is _ABSENT else _static_attribute(base, described.name)
    return _ABSENT


_PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                    types.WrapperDescriptorType, types.ClassMethodDescriptorType, classmethod, type)


def _static_attribute(owner: Any, name: str) -> Any:
    """``owner.name`` where reading it runs no code (a module's entry, a stored attribute,
    a function or builtin of the class); ``_ABSENT`` for computed attributes (properties,
    other descriptors, ``__getattr__``)."""
    if type(owner) is types.ModuleType:
        return vars(owner).get(name, _ABSENT)
    raw = inspect.getattr_static(owner, name, _ABSENT)
    if type(raw) is staticmethod:
        return raw.__func__
    if raw is not _ABSENT and hasattr(type(raw), "__get__") and not _ISINSTANCE(raw, _PLAIN_CALLABLES):
        return _ABSENT
    return raw
