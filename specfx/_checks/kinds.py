"""The kinds of decision a trace takes from an example value (:class:`GuardKind`, public as
``specfx.GuardKind``), and how a guard sees the Python values it compares."""

from __future__ import annotations

import enum
import math
from typing import Any

__all__ = ["IDENTITY", "GuardKind", "fingerprint", "identity_print", "same_value", "type_name"]


class GuardKind(str, enum.Enum):
    """What a decision read from an example value (and so which guard checks it).

    A ``str`` enum: ``GuardKind.LEN == "len"``, so records saved by 0.1 (whose kinds
    were plain strings) compare equal to the members.

    >>> GuardKind("iter") is GuardKind.ITER, str(GuardKind.ITER)
    (True, 'iter')
    """

    ITER = "iter"  # iterating: a loop, *t, tuple(t)
    UNPACK = "unpack"  # a, b = t (the code fixes the count)
    LEN = "len"
    BOOL = "bool"
    SHAPE = "shape"
    SIZE = "size"
    NDIM = "ndim"
    NUMEL = "numel"
    INT = "int"
    INDEX = "index"
    FLOAT = "float"
    ITEM = "item"
    TOLIST = "tolist"
    KEYS = "keys"
    DTYPE = "dtype"
    DEVICE = "device"
    LAYOUT = "layout"
    IS_NONE = "is_none"
    IS_TENSOR = "is_tensor"
    TYPE = "type"  # type(x) / isinstance(x, C) of a value
    VALUE = "value"  # a Python input's value read by identity, hashing or formatting
    GRAD_ENABLED = "grad_enabled"  # torch.is_grad_enabled() read by the code
    HAS_ATTR = "has_attr"  # an input lacked an attribute the code asked for

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:  # f"{kind}" reads "len" on every Python version
        return str(self.value).__format__(format_spec)


GuardKind.__module__ = "specfx.guards"  # records pickle their kinds by the public path


def type_name(value: Any) -> str:
    """The qualified name of ``type(value)`` (what :func:`guard_type` compares)."""
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def fingerprint(value: Any) -> Any:
    """What :func:`guard_value` compares: a literal as itself, anything else (an enum
    member, an object) as its type's qualified name and its repr."""
    if type(value) in (bool, int, float, complex, str, bytes, type(None)):
        return value
    if type(value) in (tuple, list):
        return type(value)(fingerprint(item) for item in value)
    return f"{type_name(value)}:{value!r}"


IDENTITY = "specfx-identity:"  # how an identity print starts (no fingerprint of a Python value does)


def identity_print(value: Any) -> str:
    """What :func:`guard_value` compares for an object forward tests by identity (``k is
    SENTINEL``): its class and the object itself, so that an equal but other object fails.
    (Held in the graph as text: a graph saved and loaded in another process fails it for every
    object but those it finds itself, such as a default it left out.)"""
    return f"{IDENTITY}{type_name(value)}@{id(value):#x}"


def same_value(actual: Any, expected: Any) -> bool:
    """Identical Python values, as every guard and export check compares them: same type
    (``2`` is not ``2.0``: eager computes with them differently), NaN matches NaN, and -0.0
    is not 0.0 (code such as ``math.copysign`` or ``1 / v`` tells them apart).

    >>> same_value(2, 2.0), same_value([1.0, float("nan")], [1.0, float("nan")]), same_value(-0.0, 0.0)
    (False, True, False)
    """
    if isinstance(expected, list) and isinstance(actual, list):
        # (torch.fx hands a graph's list constants to calls as its list subclass, immutable_list:
        # a .tolist() guard run by torch.fx.Interpreter or re-traced by specfx.trace(gm))
        return len(actual) == len(expected) and all(same_value(a, e) for a, e in zip(actual, expected))
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(same_value(a, e) for a, e in zip(actual, expected))
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)
    if isinstance(expected, complex):
        return same_value(actual.real, expected.real) and same_value(actual.imag, expected.imag)
    return bool(actual == expected)
