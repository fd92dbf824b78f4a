"""The guards that specialized graphs call at run time to check their assumptions.

A guard is an ordinary ``call_function`` node whose target is one of the
``guard_*`` functions below; printed, a graph explains itself::

    specfx_guard_len(split, 2, 'len(split)', 'model.py:12: return self.call_cat(*x)')

Each guard takes the value it checks, what it expects, the user's expression and
the source line, and raises :class:`~specfx.GuardError` when the input breaks
the assumption. The guards are registered with ``torch.fx.node.has_side_effect``
(dead-code elimination keeps them) and report as module ``specfx``: generated
code and its pickles import them from the package itself, the import path graphs
saved by every release use (FX names a global after its module and name, so a
dotted ``specfx.guards.guard_len`` is not something generated code can spell).

:class:`GuardKind` names every kind of decision; :data:`GUARDS` maps it to its guard.

>>> import torch, specfx
>>> specfx.guards.guard_len([1, 2], 2, "len(xs)", "model.py:3")
>>> specfx.guards.GUARDS[specfx.guards.GuardKind.LEN] is specfx.guards.guard_len
True
"""

from __future__ import annotations

import functools
import operator
import sys
from typing import Any, Callable, Dict, Mapping, NoReturn, Optional, TypeVar

import torch
from torch.fx.node import has_side_effect
from torch.fx.proxy import Proxy

from ._checks.defaults import LEFT_OUT, default_object
from ._checks.kinds import IDENTITY, GuardKind, fingerprint, identity_print, same_value, type_name
from ._checks.lowered import LOWERINGS
from ._policy.messages import describe_identity, guard_failure, short_repr
from .errors import GuardError

__all__ = [
    "GUARDS",
    "GuardKind",
    "describe_identity",
    "guard_device",
    "guard_dtype",
    "guard_float",
    "guard_grad_enabled",
    "guard_has_attr",
    "guard_index",
    "guard_int",
    "guard_is_none",
    "guard_is_tensor",
    "guard_item",
    "guard_keys",
    "guard_layout",
    "guard_len",
    "guard_ndim",
    "guard_numel",
    "guard_shape",
    "guard_size",
    "guard_tolist",
    "guard_truth",
    "guard_type",
    "guard_value",
]


_G = TypeVar("_G", bound=Callable[..., None])


def _guard(check: _G) -> _G:
    """Register ``check`` as a guard: kept by dead-code elimination, imported by
    generated code from ``specfx``, and recorded as a node when re-traced
    (``symbolic_trace(gm)``, unpickling) so the graph's own code stays a plain call.
    torch.fx.wrap would do the same, but every generated module would register itself
    in fx's process-wide wrap table forever, slowing down every later trace."""

    @functools.wraps(check)
    def guard(value: Any, *args: Any) -> Any:
        if isinstance(value, Proxy) or _is_foreign_proxy(value):
            return value.tracer.create_proxy("call_function", guard, (value, *args), {}, name=guard_node_name(value, guard))
        if torch.compiler.is_compiling() and guard in COMPILED:
            # torch.compile / torch.export: a Python check would break the graph or run once on
            # fake values; emit the export-native assertion instead (specfx/_checks/lowered.py)
            return COMPILED[guard](value, *args)
        try:
            return check(value, *args)
        except GuardError as error:  # name the check that failed (a length check reads as `len`)
            if error.kind is None:
                error.kind = _KIND_OF_GUARD.get(guard)
            raise

    guard.__module__ = "specfx"
    return has_side_effect(guard)  # type: ignore[return-value]


def guard_node_name(subject: Any, guard: Callable[..., Any]) -> Optional[str]:
    """The name of a guard's node when re-traced: its own, except on the output of a module
    call, where it reads as an element access (``getitem_guard_len``). Brevitas' ``quantize``
    takes a module's output for a tuple only when every node using it is named ``getitem``:
    otherwise it quantizes the tuple as a tensor (``x, _ = attention(q, k, v)`` breaks at the
    first calibration batch). A guard uses no element, so the name only keeps the
    unpacking recognizable. None: the tracer's own choice."""
    node = subject if isinstance(subject, torch.fx.Node) else getattr(subject, "__dict__", {}).get("node")
    if getattr(node, "op", None) == "call_module":
        return f"getitem_{guard.__name__}"
    return None


def _is_foreign_proxy(value: Any) -> bool:
    """A proxy of an FX copy other than torch.fx's (Brevitas vendors one, with its own
    Proxy and Node classes): it has a node and a tracer that records calls. Re-tracing
    a graph with such a tracer must record the guard, not run it on the proxy. The
    first time a copy is seen, the guards join its side-effectful functions as they
    joined torch.fx's, so that copy's dead-code elimination keeps them too."""
    # values at run time: one cheap check (a dict's __dict__ is not even readable under torch.compile)
    if isinstance(value, (torch.Tensor, dict, list, tuple)):
        return False
    state = getattr(value, "__dict__", None)  # not getattr(value, "tracer"): proxies record attribute reads
    # (an attribute read, `x.shape`, is an Attribute proxy whose node is made when first used: `_node`)
    if not isinstance(state, dict) or not ("node" in state or "_node" in state) or "tracer" not in state:
        return False
    tracer = state["tracer"]
    if not callable(getattr(tracer, "create_proxy", None)):
        return False
    _register_side_effects(type(tracer.graph).__module__.rpartition(".")[0] + ".node")  # the copy's Node module
    return True


@functools.lru_cache(maxsize=None)
def _register_side_effects(node_module: str) -> None:
    # FX copies keep torch.fx's module-level set that Node.is_impure consults
    side_effectful = getattr(sys.modules.get(node_module), "_side_effectful_functions", None)
    if isinstance(side_effectful, set):
        side_effectful.update(GUARDS.values())


def _fail(
    what: str, expected: Any, actual: Any, where: str, *, claim: str = "", observed: str = "", changed: str = "",
    branch: bool = False,
) -> NoReturn:
    raise GuardError(
        guard_failure(what, expected, actual, where, claim=claim, observed=observed, changed=changed,
                      branch=branch),
        expression=what,
        expected=expected,
        actual=actual,
        location=where,
    )


def _changed(what: str) -> str:
    """Whose dtype or device a guard reads: "model" for the model's own tensors (``self.w.dtype``),
    else "input"."""
    return "model" if what.startswith("self.") else "input"


def _observe(what: str, expected: Any, where: str, observe: Callable[[], Any]) -> Any:
    try:
        return observe()
    except Exception as error:  # a wrong input type must still fail as a guard, not elsewhere
        _fail(what, expected, f"<{type(error).__name__}: {error}>", where)


@_guard
def guard_len(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``len(value) == expected``."""
    actual = _observe(what, expected, where, lambda: len(value))
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_truth(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``bool(value) == expected``."""
    actual = _observe(what, expected, where, lambda: bool(value))
    if actual is not expected:
        _fail(what, expected, actual, where, branch=True)


@_guard
def guard_shape(value: Any, expected: tuple, what: str, where: str) -> None:
    """Fail unless ``tuple(value.shape) == expected``."""
    actual = _observe(what, expected, where, lambda: tuple(value.shape))
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_size(value: Any, dim: int, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.size(dim) == expected``."""
    actual = _observe(what, expected, where, lambda: value.size(dim))
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_ndim(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.dim() == expected``."""
    actual = _observe(what, expected, where, lambda: value.dim())
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_numel(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``value.numel() == expected``."""
    actual = _observe(what, expected, where, lambda: value.numel())
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_int(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``int(value)`` is ``expected`` (compared by :func:`same_value`, as every guard
    of a number read from data compares)."""
    actual = _observe(what, expected, where, lambda: int(value))
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_index(value: Any, expected: int, what: str, where: str) -> None:
    """Fail unless ``operator.index(value)`` is ``expected`` (compared by :func:`same_value`)."""
    actual = _observe(what, expected, where, lambda: operator.index(value))
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_float(value: Any, expected: float, what: str, where: str) -> None:
    """Fail unless ``float(value)`` is ``expected`` (NaN matches NaN, -0.0 differs from 0.0)."""
    actual = _observe(what, expected, where, lambda: float(value))
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_item(value: Any, expected: Any, what: str, where: str) -> None:
    """Fail unless ``value.item()`` is ``expected`` (same type; NaN and signed zero as in guard_float)."""
    actual = _observe(what, expected, where, lambda: value.item())
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_tolist(value: Any, expected: Any, what: str, where: str) -> None:
    """Fail unless ``value.tolist() == expected`` (element types and float signs included)."""
    actual = _observe(what, expected, where, lambda: value.tolist())
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_dtype(value: Any, expected: torch.dtype, what: str, where: str) -> None:
    """Fail unless ``value.dtype == expected``."""
    actual = _observe(what, expected, where, lambda: value.dtype)
    if actual != expected:
        _fail(what, expected, actual, where, changed=_changed(what))


@_guard
def guard_device(value: Any, expected: torch.device, what: str, where: str) -> None:
    """Fail unless ``value.device == expected``."""
    actual = _observe(what, expected, where, lambda: value.device)
    if actual != expected:
        _fail(what, expected, actual, where, changed=_changed(what))


@_guard
def guard_keys(value: Any, expected: tuple, what: str, where: str) -> None:
    """Fail unless ``tuple(value.keys()) == expected``."""
    actual = _observe(what, expected, where, lambda: tuple(value.keys()))
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_is_none(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``(value is None) == expected``; ``what`` names the value."""
    if (value is None) is not expected:
        _fail(what, expected, value is None, where, claim=describe_identity("is_none", what, expected),
              observed=describe_identity("is_none", what, not expected))


@_guard
def guard_is_tensor(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``isinstance(value, torch.Tensor) == expected``; ``what`` names the value."""
    actual = isinstance(value, torch.Tensor)
    if actual is not expected:
        _fail(what, expected, actual, where, claim=describe_identity("is_tensor", what, expected),
              observed=f"{what} is a {type(value).__name__}")




@_guard
def guard_layout(value: Any, expected: str, what: str, where: str) -> None:
    """Fail unless ``str(value.layout) == expected`` (``"torch.strided"``, ``"torch.sparse_coo"``...)."""
    actual = _observe(what, expected, where, lambda: str(value.layout))
    if actual != expected:
        _fail(what, expected, actual, where)


@_guard
def guard_type(value: Any, expected: str, what: str, where: str) -> None:
    """Fail unless ``type(value)`` is the class named ``expected`` (e.g. ``"torch.Tensor"``)."""
    actual = type_name(value)
    if actual != expected:
        _fail(what, expected, actual, where, claim=f"type({what}) is {expected}",
              observed=f"type({what}) is {actual}")


@_guard
def guard_value(value: Any, expected: Any, what: str, where: str) -> None:
    """Fail unless the Python value ``value`` is ``expected`` (same type and value; see :func:`fingerprint`)."""
    if isinstance(expected, str) and expected.startswith(IDENTITY):  # an object forward tests by identity
        if expected.startswith(IDENTITY + "default:"):
            key = expected[len(IDENTITY + "default:"):]
            holds = (type(value) is str and value == LEFT_OUT + key) or value is default_object(key)
        else:
            holds = identity_print(value) == expected
        if not holds:
            traced = "left out (its default)" if expected.startswith(IDENTITY + "default:") else "the very object it was traced with"
            _fail(what, expected, fingerprint(value), where, claim=f"{what} is {traced}",
                  observed=f"{what} is another object, {short_repr(value)}")
        return
    actual = fingerprint(value)
    if not same_value(actual, expected):
        _fail(what, expected, actual, where)


@_guard
def guard_grad_enabled(value: Any, expected: bool, what: str, where: str) -> None:
    """Fail unless ``torch.is_grad_enabled() == expected`` (``value`` is the graph's
    ``torch.is_grad_enabled()`` node)."""
    if bool(value) is not expected:
        _fail(what, expected, bool(value), where)


@_guard
def guard_has_attr(value: Any, name: str, expected: bool, what: str, where: str) -> None:
    """Fail unless ``hasattr(value, name) == expected``."""
    actual = hasattr(value, name)
    if actual is not expected:
        _fail(what, expected, actual, where)


# kind of decision -> the guard function that checks it at call time
GUARDS: Mapping[GuardKind, Callable[..., None]] = {
    GuardKind.ITER: guard_len,
    GuardKind.UNPACK: guard_len,
    GuardKind.LEN: guard_len,
    GuardKind.BOOL: guard_truth,
    GuardKind.SHAPE: guard_shape,
    GuardKind.SIZE: guard_size,
    GuardKind.NDIM: guard_ndim,
    GuardKind.NUMEL: guard_numel,
    GuardKind.INT: guard_int,
    GuardKind.INDEX: guard_index,
    GuardKind.FLOAT: guard_float,
    GuardKind.ITEM: guard_item,
    GuardKind.TOLIST: guard_tolist,
    GuardKind.KEYS: guard_keys,
    GuardKind.DTYPE: guard_dtype,
    GuardKind.DEVICE: guard_device,
    GuardKind.LAYOUT: guard_layout,
    GuardKind.IS_NONE: guard_is_none,
    GuardKind.IS_TENSOR: guard_is_tensor,
    GuardKind.TYPE: guard_type,
    GuardKind.VALUE: guard_value,
    GuardKind.GRAD_ENABLED: guard_grad_enabled,
    GuardKind.HAS_ATTR: guard_has_attr,
}
GUARD_FUNCTIONS: frozenset = frozenset(GUARDS.values())
# guard function -> its torch.compile / torch.export form (kinds sharing a guard share it); a
# kind added without a lowering keeps its Python guard (export refuses it, tests fail)
COMPILED: Mapping[Callable[..., None], Callable[..., Optional[torch.Tensor]]] = {
    GUARDS[kind]: LOWERINGS[kind] for kind in GUARDS if kind in LOWERINGS
}
# guard function -> the kind its GuardErrors carry (the last kind using it: guard_len -> LEN)
_KIND_OF_GUARD: Dict[Callable[..., None], GuardKind] = {guard: kind for kind, guard in GUARDS.items()}
