"""Runtime guards: the functions that specialized graphs call to check their
assumptions, and the ``Specialization`` record of each assumption.

A guard is an ordinary ``call_function`` node whose target is one of the
``guard_*`` functions below, e.g.::

    specfx_guard_len(split, 2, 'len(x)', 'model.py:12: return self.call_cat(*x)')

They are registered with ``torch.fx.node.has_side_effect`` (dead-code
elimination keeps them), their nodes are marked ``is_wrapped`` (generated
code re-registers them with ``torch.fx.wrap``, so pickling and re-tracing
keep them as calls), and they report as module ``specfx`` so the generated
code and its pickles import them from the public package.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import Any, Callable, Dict, NoReturn, Optional

import torch
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy

from ._policy import Specialize
from ._source import SourceLocation
from .errors import GuardError

__all__ = ["GUARDS", "Specialization"]


def _fail(
    what: str, expected: Any, actual: Any, where: str, *, claim: str = "", observed: str = ""
) -> NoReturn:
    assumption = claim or f"{what} == {expected!r}"
    observation = observed or f"{what} == {actual!r}"
    raise GuardError(
        f"specfx guard failed: the graph was traced assuming {assumption}, "
        f"but for this input {observation}.\n"
        f"  assumed at {where}\n"
        f"The graph is only valid for inputs that keep this assumption. Retrace with an "
        f"example input like this one (specfx.trace(model, example_inputs, policy=...)), "
        f"let specfx.Specializer(model, policy) keep one graph per set of assumptions, "
        f"or narrow the policy so that this value stays symbolic.",
        expression=what,
        expected=expected,
        actual=actual,
        location=where,
    )


def _observe(what: str, expected: Any, where: str, observe: Callable[[], Any]) -> Any:
    try:
        return observe()
    except Exception as error:  # a wrong input type must still fail as a guard, not elsewhere
        _fail(what, expected, f"<{type(error).__name__}: {error}>", where)


def _same(actual: Any, expected: Any) -> bool:
    """Identical Python values: same type, NaN matches NaN, and -0.0 is not 0.0
    (code such as ``math.copysign`` or ``1 / v`` tells them apart)."""
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected))
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected and math.copysign(1.0, actual) == math.copysign(1.0, expected)
    if isinstance(expected, complex):
        return _same(actual.real, expected.real) and _same(actual.imag, expected.imag)
    return bool(actual == expected)


def guard_len(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``len(value) == expected``."""
    actual = _observe(what, expected, where, lambda: len(value))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_truth(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``bool(value) == expected``."""
    actual = _observe(what, expected, where, lambda: bool(value))
    if actual is not expected:
        _fail(what, expected, actual, where)


def guard_shape(value: Any, expected: tuple, what: str, where: str) -> None:
    """Fail unless ``tuple(value.shape) == expected``."""
    actual = _observe(what, expected, where, lambda: tuple(value.shape))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_size(value: Any, dim: int, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.size(dim) == expected``."""
    actual = _observe(what, expected, where, lambda: value.size(dim))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_ndim(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.dim() == expected``."""
    actual = _observe(what, expected, where, lambda: value.dim())
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_numel(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.numel() == expected``."""
    actual = _observe(what, expected, where, lambda: value.numel())
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_int(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``int(value) == expected``."""
    actual = _observe(what, expected, where, lambda: int(value))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_index(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``operator.index(value) == expected``."""
    actual = _observe(what, expected, where, lambda: operator.index(value))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_float(value: Any, expected: float, what: str, where: str) -> None:
    """Fail unless ``float(value)`` is ``expected`` (NaN matches NaN, -0.0 differs from 0.0)."""
    actual = _observe(what, expected, where, lambda: float(value))
    if not _same(actual, expected):
        _fail(what, expected, actual, where)


def guard_item(value: Any, expected: Any, what: str, where: str) -> None:
    """Fail unless ``value.item()`` is ``expected`` (same type; NaN and signed zero as in guard_float)."""
    actual = _observe(what, expected, where, lambda: value.item())
    if not _same(actual, expected):
        _fail(what, expected, actual, where)


def guard_tolist(value: Any, expected: Any, what: str, where: str) -> None:
    """Fail unless ``value.tolist() == expected`` (element types and float signs included)."""
    actual = _observe(what, expected, where, lambda: value.tolist())
    if not _same(actual, expected):
        _fail(what, expected, actual, where)


def guard_dtype(value: Any, expected: torch.dtype, what: str, where: str) -> None:
    """Fail unless ``value.dtype == expected``."""
    actual = _observe(what, expected, where, lambda: value.dtype)
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_device(value: Any, expected: torch.device, what: str, where: str) -> None:
    """Fail unless ``value.device == expected``."""
    actual = _observe(what, expected, where, lambda: value.device)
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_keys(value: Any, expected: tuple, what: str, where: str) -> None:
    """Fail unless ``tuple(value.keys()) == expected``."""
    actual = _observe(what, expected, where, lambda: tuple(value.keys()))
    if actual != expected:
        _fail(what, expected, actual, where)


def guard_is_none(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``(value is None) == expected``; ``what`` names the value."""
    if (value is None) is not expected:
        _fail(what, expected, value is None, where, claim=describe_identity("is_none", what, expected),
              observed=describe_identity("is_none", what, not expected))


def guard_is_tensor(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``isinstance(value, torch.Tensor) == expected``; ``what`` names the value."""
    actual = isinstance(value, torch.Tensor)
    if actual is not expected:
        _fail(what, expected, actual, where, claim=describe_identity("is_tensor", what, expected),
              observed=f"{what} is a {type(value).__name__}")


def describe_identity(kind: str, subject: str, holds: bool) -> str:
    """``x is None`` / ``x is not None`` / ``x is a Tensor`` / ``x is not a Tensor``."""
    if kind == "is_none":
        return f"{subject} is None" if holds else f"{subject} is not None"
    return f"{subject} is a Tensor" if holds else f"{subject} is not a Tensor"


# kind of specialization -> the guard function that checks it at call time
GUARDS: Dict[str, Callable[..., None]] = {
    "iter": guard_len,
    "unpack": guard_len,
    "len": guard_len,
    "bool": guard_truth,
    "shape": guard_shape,
    "size": guard_size,
    "ndim": guard_ndim,
    "numel": guard_numel,
    "int": guard_int,
    "index": guard_index,
    "float": guard_float,
    "item": guard_item,
    "tolist": guard_tolist,
    "keys": guard_keys,
    "dtype": guard_dtype,
    "device": guard_device,
    "is_none": guard_is_none,
    "is_tensor": guard_is_tensor,
}

def _records_itself(check: Callable[..., None]) -> Callable[..., None]:
    """Make a guard record itself as a node when re-traced (``symbolic_trace(gm)``,
    unpickling): the graph's own code then stays a plain call. torch.fx.wrap would do
    the same, but every generated module would register itself in fx's process-wide
    wrap table forever, slowing down every later trace."""

    @functools.wraps(check)
    def guard(value: Any, *args: Any) -> Any:
        if isinstance(value, Proxy):
            return value.tracer.create_proxy("call_function", guard, (value, *args), {})
        return check(value, *args)

    guard.__module__ = "specfx"  # generated code names it `specfx_guard_*`, imported from `specfx`
    return has_side_effect(guard)


_WRAPPED = {check: _records_itself(check) for check in set(GUARDS.values())}
GUARDS = {kind: _WRAPPED[check] for kind, check in GUARDS.items()}
globals().update({guard.__name__: guard for guard in _WRAPPED.values()})  # the public names are the guards


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One decision baked into a traced graph, and the guard that checks it.

    ``kind`` is what was read (``"iter"``, ``"unpack"``, ``"len"``,
    ``"bool"``, ``"shape"``, ``"size"``, ``"ndim"``, ``"numel"``, ``"int"``,
    ``"index"``, ``"float"``, ``"item"``, ``"tolist"``, ``"keys"``,
    ``"dtype"``, ``"device"``, ``"is_none"``, ``"is_tensor"``), ``flag`` the :class:`Specialize` flag
    that allowed it (``Specialize.NONE`` for decisions the code itself fixes,
    such as unpacking into two names, ``x is None`` or ``x.dtype``), ``value`` the traced
    value, ``expression`` what was read (``"len(x)"``), ``node`` the name of
    the graph node it was read from, ``location`` the user's source line,
    ``module`` the qualified name of the submodule being traced, ``guard`` the
    name of the guard node (None with ``guards=False``) and ``degenerate``
    whether it was decided on an empty container or a size-0/1 dimension.

    >>> import torch, specfx
    >>> def f(x):
    ...     return torch.cat([*torch.chunk(x, 2)])
    >>> (s,) = specfx.trace(f, torch.ones(4), policy=specfx.Policy(iter=True)).specializations
    >>> s.kind, s.value, s.flag, s.guard_description
    ('iter', 2, <Specialize.ITER_LEN: 1>, 'len(chunk) == 2')
    """

    kind: str
    flag: Specialize
    value: Any
    expression: str
    node: str
    location: Optional[SourceLocation]
    module: str = ""
    guard: Optional[str] = None
    degenerate: bool = False

    @property
    def where(self) -> str:
        """``file:line`` of the user code that made the decision ('<unknown>' if none)."""
        return str(self.location) if self.location else "<unknown>"

    @property
    def source(self) -> str:
        """The user's source line that made the decision ('' if unknown)."""
        return self.location.text if self.location else ""

    @property
    def guard_description(self) -> str:
        """The assumption the guard checks, e.g. ``len(x) == 2`` or ``mask is None``."""
        if self.kind in ("is_none", "is_tensor"):
            return describe_identity(self.kind, self.expression, bool(self.value))
        return f"{self.expression} == {self.value!r}"
