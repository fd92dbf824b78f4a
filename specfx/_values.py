"""The value-carrying proxy: an FX ``Proxy`` that also holds the concrete
value its node computed on the example inputs.

Every dunder that needs a value (``__bool__``, ``__iter__``, ``__len__``,
``__int__``...) is handed to the tracer, which asks the policy in force and
either answers from the value (recording the decision and emitting a guard)
or raises ``SpecializationError``. The proxy keeps its own state in
``__dict__`` under ``_specfx_*`` names: anything else would shadow a tensor
attribute of the same name (``x.value`` must still mean the tensor's).
"""

from __future__ import annotations

import operator
import sys
from typing import TYPE_CHECKING, Any, Iterator

import torch
from torch.fx.proxy import Attribute, Proxy

from ._source import is_user_file

if TYPE_CHECKING:
    from ._tracer import SpecTracer

__all__ = ["MISSING", "ValueAttribute", "ValueProxy", "builtin_isinstance", "traced_isinstance", "value_of"]


class _Missing:
    """The value of a proxy traced without example inputs."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no example value>"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

# Tensor attributes/methods that read shapes (SHAPES) or data (SCALARS).
SHAPE_ATTRIBUTES = frozenset({"shape", "ndim"})
SHAPE_METHODS = frozenset({"size", "dim", "numel", "nelement"})
SCALAR_METHODS = frozenset({"item", "tolist"})
# Tensor attributes/methods that read the dtype or device: values, guarded.
TYPE_ATTRIBUTES = frozenset({"dtype", "device", "is_cuda", "is_meta", "is_quantized", "is_sparse"})
TYPE_METHODS = frozenset({"is_floating_point", "is_complex", "is_signed", "element_size", "get_device"})


_PLAIN_TYPES = frozenset({tuple, list, dict, int, float, bool, complex, str})


def traced_isinstance(obj: Any, classinfo: Any) -> bool:
    """``builtins.isinstance`` while specfx traces with example inputs: a proxy with
    a value answers as its value does (so ``isinstance(x, torch.Tensor)`` is True
    for a tensor input, and that answer is guarded); anything else as usual."""
    if builtin_isinstance(obj, ValueProxy):
        value = obj.__dict__.get("_specfx_value", MISSING)
        caller = sys._getframe(2)  # (1) is the dispatcher specfx._patches installs
        # torch (and torch.fx) must keep seeing a Proxy: they dispatch it via __torch_function__.
        if value is not MISSING and is_user_file(caller.f_code.co_filename):
            obj.tracer.note_type_read(obj, caller)
            return builtin_isinstance(value, classinfo)
    return builtin_isinstance(obj, classinfo)


builtin_isinstance = isinstance  # bound before any patching


def value_of(proxy: Proxy) -> Any:
    """The concrete value carried by ``proxy`` (``MISSING`` if it has none)."""
    return proxy.__dict__.get("_specfx_value", MISSING)


class ValueProxy(Proxy):
    """A ``torch.fx.Proxy`` that carries the concrete example value of its node.

    Created by the specfx tracer; user code sees it wherever ``symbolic_trace``
    would hand it a ``Proxy``. ``isinstance(p, torch.Tensor)`` answers as the
    carried value does.
    """

    tracer: "SpecTracer"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_specfx"):
            raise AttributeError(name)
        value = value_of(self)
        if value is MISSING:
            return ValueAttribute(self, name, MISSING)
        try:
            attribute = getattr(value, name)
        except AttributeError:
            raise AttributeError(
                f"{type(value).__name__!r} object has no attribute {name!r} "
                f"(the traced value of `{self.node.name}`)"
            ) from None
        if name in SHAPE_ATTRIBUTES and isinstance(value, torch.Tensor):
            return self.tracer.read_shape_attribute(self, name, attribute)
        if name in TYPE_ATTRIBUTES and isinstance(value, torch.Tensor):
            return self.tracer.read_type_attribute(self, name, attribute)
        return ValueAttribute(self, name, attribute)

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # isinstance(p, tuple/list/dict/int/...) answers as the value does. Never for tensors:
        # torch's C++ checks (THPVariable_Check) use isinstance and would then read the proxy
        # as a tensor and crash; `isinstance(x, torch.Tensor)` is answered by `traced_isinstance`.
        value = self.__dict__.get("_specfx_value", MISSING)
        if type(value) in _PLAIN_TYPES:
            return type(value)
        return type(self)

    # -- value-demanding dunders: the tracer decides ---------------------------------

    def __bool__(self) -> bool:
        return self.tracer.resolve_bool(self)

    def __iter__(self) -> Iterator[Any]:
        return self.tracer.resolve_iter(self, sys._getframe(1))

    def __len__(self) -> int:
        return self.tracer.resolve_len(self)

    def __int__(self) -> int:
        return self.tracer.resolve_number(self, "int")

    def __float__(self) -> float:
        return self.tracer.resolve_number(self, "float")

    def __index__(self) -> int:
        return self.tracer.resolve_number(self, "index")

    def __contains__(self, item: Any) -> bool:
        return self.tracer.resolve_contains(self, item)

    def __setitem__(self, index: Any, value: Any) -> None:
        self.tracer.record_setitem(self, index, value)

    def __getitem__(self, index: Any) -> Any:
        return self.tracer.getitem(self, index)


def _in_place(operator_name: str) -> Any:
    target = getattr(operator, operator_name)

    def in_place(self: ValueProxy, other: Any) -> Any:
        # `self.steps += 1` on a buffer must update the buffer when the graph runs, as in
        # eager; elsewhere `+=` stays the out-of-place op torch.fx records (NotImplemented).
        if type(self) is ValueProxy and self.node.op == "get_attr":
            return self.tracer.create_proxy("call_function", target, (self, other), {})
        return NotImplemented

    in_place.__name__ = f"__{operator_name}__"
    return in_place


for _name in ("iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul",
              "iand", "ior", "ixor", "ilshift", "irshift"):
    setattr(ValueProxy, f"__{_name}__", _in_place(_name))


class ValueAttribute(ValueProxy, Attribute):
    """``proxy.name``: a lazily materialized ``getattr`` node (most attributes
    are methods that are called right away) carrying the attribute's value."""

    def __init__(self, root: ValueProxy, attr: str, value: Any) -> None:
        Attribute.__init__(self, root, attr)
        self.__dict__["_specfx_value"] = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tracer.call_method(self.root, self.attr, args, kwargs)
