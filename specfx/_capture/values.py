"""The value-carrying proxy: an FX ``Proxy`` that also holds the concrete
value its node computed on the example inputs.

Every dunder that needs a value (``__bool__``, ``__iter__``, ``__len__``,
``__int__``...) is handed to the tracer, which asks the policy in force and
either answers from the value (recording the decision and emitting a guard)
or raises ``SpecializationError``. What the proxy needs from its tracer is the
:class:`ValueTracer` protocol. The proxy keeps its own state, one
:class:`ProxyState` record, in ``__dict__["_specfx"]``: an attribute would
shadow a tensor attribute of the same name (``x.value`` must still mean the tensor's).
"""

from __future__ import annotations

import operator
import sys
import types
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Protocol, Tuple

import torch
from torch.fx.proxy import Attribute, Proxy

from .._policy import messages as _messages
from .._frames.source import SourceLocation
from .._frames.type_reads import CannotTell, isinstance_asker

__all__ = [
    "MISSING",
    "PENDING",
    "ProxyState",
    "ValueAttribute",
    "ValueProxy",
    "ValueTracer",
    "state_of",
    "value_of",
]


class _Missing:
    """The value of a proxy traced without example inputs."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no example value>"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class ProxyState(NamedTuple):
    """What specfx knows about a proxy beyond its node.

    ``value``: the concrete example value (``MISSING`` when traced symbolically);
    ``from_shapes``: computed from shapes only (``int()`` of it is a SHAPES decision);
    ``degenerate``: read from a size-0/1 dimension; ``mapping``: for a
    ``d.keys()``/``values()``/``items()`` view, the proxy of the dict ``d``; ``dim``: for
    one dimension of a tensor (``x.shape[1]``, ``x.size(1)``), the tensor's proxy and the dim
    (None for ``x.size()`` itself).
    """

    value: Any = MISSING
    from_shapes: bool = False
    degenerate: bool = False
    mapping: Optional["ValueProxy"] = None
    dim: Optional[Tuple["ValueProxy", Optional[int]]] = None


_NO_STATE = ProxyState()
# The state of a proxy whose value the tracer computes later (see _deferred.py): asking for
# it computes it. (Its own object, told apart by identity; read directly it has no value.)
PENDING = ProxyState()


def state_of(proxy: Any) -> ProxyState:
    """The :class:`ProxyState` of ``proxy`` (an empty one for stock FX proxies), once every
    op recorded before has been computed (its value may be one that a pending op writes)."""
    found = proxy.__dict__
    state = found.get("_specfx", _NO_STATE)
    if state is not _NO_STATE and (state is PENDING or found["tracer"].pending_values):
        state = found["tracer"].computed_state(proxy)
    return state


def value_of(proxy: Any) -> Any:
    """The concrete value carried by ``proxy`` (``MISSING`` if it has none)."""
    found = proxy.__dict__  # (state_of's body, inlined: read for nearly every node)
    state = found.get("_specfx", _NO_STATE)
    if state is not _NO_STATE and (state is PENDING or found["tracer"].pending_values):
        state = found["tracer"].computed_state(proxy)
    return state.value


class ValueTracer(Protocol):
    """What a :class:`ValueProxy` asks of its tracer (``SpecTracer`` implements it):
    FX's own hooks (``to_bool``, ``iter``, ``create_proxy``) plus one hook per other
    value-demanding operation. Each hook answers from the value (a recorded,
    guarded decision) or raises ``SpecializationError``."""

    def create_proxy(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                     name: Optional[str] = None, type_expr: Optional[Any] = None) -> Any: ...

    pending_values: List[Any]  # ops whose values are computed when first read

    def computed_state(self, proxy: "ValueProxy") -> ProxyState: ...

    def to_bool(self, obj: Any) -> bool: ...

    def iter(self, obj: Any, frame: Optional[types.FrameType] = None) -> Iterator[Any]: ...

    def resolve_len(self, proxy: "ValueProxy") -> int: ...

    def resolve_number(self, proxy: "ValueProxy", conversion: str,
                       frame: Optional[types.FrameType] = None) -> Any: ...

    def resolve_contains(self, proxy: "ValueProxy", item: Any) -> bool: ...

    def record_setitem(self, proxy: "ValueProxy", index: Any, value: Any) -> None: ...

    def getitem(self, proxy: "ValueProxy", index: Any) -> Any: ...

    def read_attribute(self, proxy: "ValueProxy", name: str, attribute: Any,
                       frame: Optional[types.FrameType] = None) -> Any: ...

    def call_method(self, root: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                    frame: Optional[types.FrameType] = None) -> Any: ...

    def note_type_read(self, proxy: "ValueProxy", frame: types.FrameType) -> None: ...

    def records_factories(self) -> bool: ...

    def refuse(self, error: BaseException) -> Any: ...

    def describe(self, proxy: Any, frame: Optional[types.FrameType] = None) -> str: ...

    def none_attribute(self, proxy: "ValueProxy", name: str) -> None: ...

    def resolve_format(self, proxy: "ValueProxy", spec: str, frame: Optional[types.FrameType] = None) -> str: ...

    def resolve_hash(self, proxy: "ValueProxy") -> int: ...

    def note_python_attribute(self, proxy: "ValueProxy", name: str, present: bool) -> None: ...

    def assign_attribute(self, proxy: "ValueProxy", name: str, value: Any) -> None: ...

# Tensor attributes/methods that read shapes (SHAPES) or data (SCALARS).
SHAPE_ATTRIBUTES = frozenset({"shape", "ndim"})
SHAPE_METHODS = frozenset({"size", "dim", "numel", "nelement"})
SCALAR_METHODS = frozenset({"item", "tolist"})
# Python values whose hash is their value's (a traced one is a decision when hashed)
_HASHED_BY_VALUE = frozenset({int, float, bool, complex, str, bytes})
# Tensor attributes/methods that read the dtype or device: values, guarded.
TYPE_ATTRIBUTES = frozenset({"dtype", "device", "is_cuda", "is_meta", "is_quantized", "is_sparse", "layout",
                             "requires_grad", "is_leaf"})
TYPE_METHODS = frozenset({"is_floating_point", "is_complex", "is_signed", "element_size", "get_device"})
VALUE_ATTRIBUTES = SHAPE_ATTRIBUTES | TYPE_ATTRIBUTES


_PLAIN_TYPES = frozenset({tuple, list, dict, int, float, bool, complex, str})
# The attributes torch.fx's Proxy and Attribute set on themselves.
_PROXY_FIELDS = frozenset({"tracer", "node", "root", "attr", "_node"})


class ValueProxy(Proxy):
    """A ``torch.fx.Proxy`` that carries the concrete example value of its node.

    Created by the specfx tracer; user code sees it wherever ``symbolic_trace``
    would hand it a ``Proxy``. ``isinstance(p, torch.Tensor)`` in user code answers
    as the carried value does (guarded); torch and torch.fx keep seeing a Proxy.
    """

    tracer: ValueTracer  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_specfx"):
            raise AttributeError(name)
        value = value_of(self)
        if value is MISSING:
            return ValueAttribute(self, name, MISSING)
        try:
            attribute = getattr(value, name)
        except AttributeError:
            self.tracer.note_python_attribute(self, name, False)
            raise AttributeError(
                f"{type(value).__name__!r} object has no attribute {name!r} "
                f"(the traced value of `{self.tracer.describe(self)}`)"
            ) from None
        if name in VALUE_ATTRIBUTES and isinstance(value, torch.Tensor):
            # the frame that reads it, taken here at the entry (what follows, `x.shape[1]`, is read there)
            return self.tracer.read_attribute(self, name, attribute, sys._getframe(1))
        if isinstance(value, torch.Tensor) and name in value.__dict__:  # a Python attribute of the example
            self.tracer.note_python_attribute(self, name, True)
        if attribute is None:  # `x.grad is None`: None in the code, as in eager (guarded)
            return self.tracer.none_attribute(self, name)
        return ValueAttribute(self, name, attribute)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # isinstance() falls back to `__class__` when the type check fails: user code's
        # isinstance(p, torch.Tensor) gets the value's class (a guarded decision), torch keeps a
        # Proxy (its C++ checks would take the proxy for a tensor and crash: _type_reads.py).
        # Plain Python values (tuple, int...) answer as themselves to everyone.
        value = value_of(self)
        if value is MISSING:
            return type(self)
        kind = type(value)
        plain = kind in _PLAIN_TYPES
        try:
            asker = isinstance_asker(sys._getframe(1))
        except CannotTell as unknown:
            if plain:  # the answer is the same to everyone: guard it, as if isinstance asked
                asker = unknown.frame
            else:
                location = SourceLocation(unknown.frame.f_code.co_filename, unknown.frame.f_lineno,
                                          unknown.frame.f_code.co_name)
                self.tracer.refuse(_messages.unknown_type_reader_error(self.tracer.describe(self), value, location))
        if asker is None or not self.tracer.records_factories():
            return kind if plain else type(self)
        self.tracer.note_type_read(self, asker)
        return kind

    def __setattr__(self, name: str, value: Any) -> None:
        # torch.fx's own fields are the proxy's; any other assignment is the traced code's
        # (`x.data = y`, `state.h = t`): the tracer refuses what a graph cannot repeat
        if name not in _PROXY_FIELDS:
            self.tracer.assign_attribute(self, name, value)
        object.__setattr__(self, name, value)

    # -- value-demanding dunders: the tracer decides ---------------------------------

    # (__bool__ is FX's: it calls the tracer's `to_bool` hook)

    def __iter__(self) -> Iterator[Any]:
        # FX's __iter__ unpacks without asking the tracer; ours always asks its `iter` hook, with
        # the frame that iterates (taken here, at the entry: `a, b = x` is read there)
        return self.tracer.iter(self, sys._getframe(1))

    def __len__(self) -> int:
        return self.tracer.resolve_len(self)

    # (the frame that converts or formats, taken here: a message built from it is free)
    def __int__(self) -> int:
        return self.tracer.resolve_number(self, "int", sys._getframe(1))

    def __float__(self) -> float:
        return self.tracer.resolve_number(self, "float", sys._getframe(1))

    def __index__(self) -> int:
        return self.tracer.resolve_number(self, "index", sys._getframe(1))

    def __format__(self, spec: str) -> str:
        # f"{x.shape[0]}" and str(n) must read the value, not "Proxy(getitem)"
        if value_of(self) is MISSING:
            return format(Proxy.__repr__(self), spec)  # traced symbolically: torch.fx's text
        return self.tracer.resolve_format(self, spec, sys._getframe(1))

    def __hash__(self) -> int:
        # {2: a, 3: b}.get(n) and `n in {2, 3}` hash a traced Python value: its value's hash is
        # a decision; a tensor (or nothing carried) hashes by identity, as a tensor does
        if type(value_of(self)) in _HASHED_BY_VALUE:
            return self.tracer.resolve_hash(self)
        return object.__hash__(self)

    def __str__(self) -> str:
        if value_of(self) is MISSING:
            return Proxy.__repr__(self)  # traced symbolically: torch.fx's text
        return self.tracer.resolve_format(self, "", sys._getframe(1))

    def __contains__(self, item: Any) -> bool:
        return self.tracer.resolve_contains(self, item)

    def __setitem__(self, index: Any, value: Any) -> None:
        self.tracer.record_setitem(self, index, value)

    def __getitem__(self, index: Any) -> Any:
        return self.tracer.getitem(self, index)


def _in_place(operator_name: str) -> Any:
    target = getattr(operator, operator_name)

    def in_place(self: ValueProxy, other: Any) -> Any:
        # `t += 1` on a tensor writes to it in eager: a buffer must be updated when the graph
        # runs, and another name for `t` must see the change. Without a value (symbolic
        # tracing) `+=` stays the out-of-place op torch.fx records (NotImplemented).
        if type(self) is ValueProxy and (self.node.op == "get_attr" or isinstance(value_of(self), torch.Tensor)):
            return self.tracer.create_proxy("call_function", target, (self, other), {})
        return NotImplemented

    in_place.__name__ = f"__{operator_name}__"
    return in_place


def _recorded(function: Any, reflected: bool = False) -> Any:
    def method(self: ValueProxy, *args: Any) -> Any:
        # divmod() and round() of a traced value (a size, a scalar, a tensor): a node calling the
        # builtin when the graph runs, so the value stays symbolic (torch.fx's Proxy has neither)
        if value_of(self) is MISSING:
            raise TypeError(f"type {type(self).__name__} doesn't define __{function.__name__}__ method")
        operands = (args[0], self) if reflected else (self, *args)
        return self.tracer.create_proxy("call_function", function, operands, {})

    method.__name__ = f"__{'r' if reflected else ''}{function.__name__}__"
    return method


for _function, _reflected in ((round, False), (divmod, False), (divmod, True)):
    setattr(ValueProxy, f"__{'r' if _reflected else ''}{_function.__name__}__", _recorded(_function, _reflected))


for _name in ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul",
              "iand", "ior", "ixor", "ilshift", "irshift"):
    setattr(ValueProxy, f"__{_name}__", _in_place(_name))


class ValueAttribute(ValueProxy, Attribute):
    """``proxy.name``: a lazily materialized ``getattr`` node (most attributes
    are methods that are called right away) carrying the attribute's value."""

    def __init__(self, root: ValueProxy, attr: str, value: Any) -> None:
        Attribute.__init__(self, root, attr)
        self.__dict__["_specfx"] = ProxyState(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tracer.call_method(self.root, self.attr, args, kwargs, sys._getframe(1))
