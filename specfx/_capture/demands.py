"""The value-demand hooks of :class:`~specfx.SpecTracer`: what a traced program asks of a value.

A :class:`~specfx._capture.values.ValueProxy` forwards every value-demanding operation
(``bool()``, ``len()``, iteration, ``int()``, formatting, ``in``, shape and
dtype reads, ``.item()``...) to its tracer through the
:class:`~specfx._capture.values.ValueTracer` protocol. :class:`ValueDemands` implements
that protocol: each hook takes the answer from the example value, describes it
as a :class:`~specfx._capture.decisions.Decision` and hands it to the tracer's
:class:`~specfx._capture.decisions.Decider` (policy check, record, guard), or refuses
with :class:`~specfx.errors.SpecializationError`. ``SpecTracer`` (``_tracer.py``)
mixes it in and owns everything else: driving the trace, creating nodes and
computing their values.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import operator
import sys
import types
from typing import Any, Callable, Dict, Iterator, NoReturn, Optional, Tuple, cast

import torch
from torch.fx.node import Node
from torch.fx.proxy import Proxy

from .._policy import messages as _messages
from .._frames.bytecode import constant_subscript_next, unpack_count, unpack_discards, unpacked_next
from .._frames.bytecode import Attribute
from .._frames.message_flow import GRAPH, message_sink, only_stored, resolve_described, value_consumers
from .._graph.message_text import placeholder
from .decisions import Decider, Decision
from .._policy.describe import is_input_path
from .evaluation import Unevaluable, proxies_in
from .factories import FACTORIES
from .._policy.policy import Layer, Resolved, Specialize, resolve
from .._policy.scope import current_layers
from .._policy.spelling import spelling
from .._frames.source import SourceLocation, is_user_file, user_frame, user_location
from .values import (
    MISSING,
    SCALAR_METHODS,
    SHAPE_ATTRIBUTES,
    SHAPE_METHODS,
    TYPE_METHODS,
    ProxyState,
    ValueAttribute,
    ValueProxy,
    state_of,
    value_of,
)
from ..errors import SpecializationError
from ..guards import GuardKind
from .roots import definition_line
from .._checks.kinds import fingerprint, type_name

__all__ = ["ValueDemands", "deferred_shapes"]

# Set while trace(..., calibration=) and Specializer.fit trace (see deferred_shapes).
_DEFER_SHAPES: contextvars.ContextVar[bool] = contextvars.ContextVar("specfx_deferred_shapes", default=False)


@contextlib.contextmanager
def deferred_shapes() -> Iterator[None]:
    """Within it, traces read a tensor's shape as traces without ``SHAPES`` do (a node
    for ``x.shape``, ``x.size(d)``, ``x.numel()``) and ``SHAPES`` grants the decisions
    taken on those values where the code needs a Python answer (``range(n)``,
    ``int(n)``, a branch or a loop on a size): a size that only flows into ops stays
    symbolic, so one graph serves batches of several sizes. ``trace(...,
    calibration=)`` and ``Specializer.fit`` trace this way when sizes differ between
    batches. Parameters' shapes and ``ndim`` are still read as ints (they do not vary
    between batches)."""
    token = _DEFER_SHAPES.set(True)
    try:
        yield
    finally:
        _DEFER_SHAPES.reset(token)

_CONVERSIONS: Dict[str, Tuple[GuardKind, Callable[[Any], Any], str]] = {
    "int": (GuardKind.INT, int, "int"),
    "float": (GuardKind.FLOAT, float, "float"),
    "index": (GuardKind.INDEX, operator.index, "operator.index"),
}
_SHAPE_METHOD_KINDS = {"dim": GuardKind.NDIM, "numel": GuardKind.NUMEL, "nelement": GuardKind.NUMEL}


def _is_meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"



class ValueDemands:
    """The :class:`~specfx._capture.values.ValueTracer` hooks, mixed into ``SpecTracer``: each
    answers a value demand from the example value as a recorded, guarded decision."""

    # Provided by SpecTracer (the tracer this is mixed into).
    decisions: Decider
    _evaluating: int
    _base_layer: Layer
    _module_path: list[str]
    examples: Optional[Dict[str, Any]]
    message_values: list[Tuple[ValueProxy, str]]

    # SpecTracer.create_proxy (torch.fx's signature) and SpecTracer.refuse.
    create_proxy: Callable[..., Proxy]
    refuse: Callable[[BaseException], NoReturn]
    records_factories: Callable[[], bool]
    constant_proxy: Callable[[Any, str], Proxy]

    # -- decisions -------------------------------------------------------------------------

    def _resolved(self) -> Resolved:
        return resolve((self._base_layer,) + current_layers())

    def decide(self, decision: Decision) -> None:
        """Hand ``decision`` to the one place that checks, records and guards decisions."""
        if self._evaluating:
            raise Unevaluable()
        resolved = self._resolved()
        if (_DEFER_SHAPES.get() and decision.flag not in (Specialize.NONE, Specialize.SHAPES)
                and Specialize.SHAPES in resolved.flags and state_of(decision.subject).from_shapes):
            # a branch, a loop or a length taken on a deferred size: SHAPES would have granted
            # reading the size as an int and deciding in Python, so it grants this narrower decision
            decision = dataclasses.replace(decision, flag=Specialize.SHAPES)
        self.decisions.decide(decision, resolved, self._module_path[-1] if self._module_path else "")

    def describe(self, proxy: Any, frame: Optional[types.FrameType] = None) -> str:
        """``proxy``'s value in the user's terms: the name the user's code (``frame``, else
        the innermost frame outside specfx and torch.fx) holds it under, else the expression
        that computed it (``x.sum() > 0``)."""
        frame = frame or user_frame()
        local_names: Dict[Node, str] = {}
        for name, local in (frame.f_locals.items() if frame is not None else ()):
            if local is proxy:
                return name
            if type(local) is ValueProxy:
                local_names.setdefault(local.node, name)
        if type(proxy) is not ValueProxy:  # an attribute not yet materialized
            return f"{self.describe(proxy.root, frame)}.{proxy.attr}"
        return self.decisions.describe.name(proxy.node, 0, local_names)

    def _call(self, target: Callable[..., Any], *args: Any) -> ValueProxy:
        """A ``call_function`` node of ``target(*args)`` (with its value)."""
        return cast(ValueProxy, self.create_proxy("call_function", target, args, {}))

    # -- value demands --

    def _message_sink(self, frame: Optional[types.FrameType]) -> Optional[str]:
        """Whether the text that ``frame`` (else the innermost user frame) builds from a traced
        value only feeds a message (``_frames/message_flow.py``): ``GRAPH``, ``TEXT`` or None."""
        if self._evaluating:
            raise Unevaluable()
        if self.examples is None:
            return None
        frame = frame if frame is not None else user_frame()
        return message_sink(frame) if frame is not None else None

    def _flag_for(self, proxy: ValueProxy, flag: Specialize) -> Specialize:
        """``flag``, or SHAPES for a value computed from shapes alone when the policy grants
        SHAPES: the truth of `h > 1` and the length of `x.shape` are decisions on sizes."""
        if type(proxy) is ValueProxy and state_of(proxy).from_shapes:
            flags = self._resolved().flags
            if Specialize.SHAPES in flags and flag not in flags:
                return Specialize.SHAPES
        return flag

    def _require_value(self, proxy: ValueProxy, operation: str, flag: Specialize, kind: str) -> Any:
        if self._evaluating:
            raise Unevaluable()
        value = value_of(proxy)
        if value is MISSING:
            self.refuse(_messages.no_value_error(operation, flag, user_location(), self.describe(proxy), kind))
        return value

    def _none(self, proxy: ValueProxy, location: Optional[SourceLocation] = None) -> Any:
        """A value that is None is handed to the code as None, guarded to stay None."""
        text = self.describe(proxy)
        self.decide(Decision(proxy, GuardKind.IS_NONE, Specialize.NONE, True, (True,), text, f"`{text}`",
                             location=location))
        return None

    def _not_none(self, proxy: ValueProxy, location: Optional[SourceLocation] = None) -> None:
        """An optional input (or an element of an input) that is not None: guarded to stay so."""
        text = self.describe(proxy)
        self.decide(Decision(proxy, GuardKind.IS_NONE, Specialize.NONE, False, (False,), text, f"`{text}`",
                             location=location))

    def to_bool(self, obj: Any) -> bool:
        """Called for ``bool(proxy)`` (``if``, ``while``, ``and``/``or``/``not``, ``assert``)."""
        text = self.describe(obj)
        operation = f"bool() of `{text}`"
        value = self._require_value(obj, operation, Specialize.BOOL, "bool")
        truth = None if _is_meta(value) else bool(value)
        self.decide(Decision(obj, GuardKind.BOOL, self._flag_for(obj, Specialize.BOOL), truth, (truth,), f"bool({text})", operation,
                             needs_data=isinstance(value, torch.Tensor), fix=_config_fix(obj, value)))
        return bool(truth)

    def resolve_len(self, proxy: ValueProxy) -> int:
        """Called for ``len(proxy)``."""
        text = self.describe(proxy)
        operation = f"len() of `{text}`"
        length = len(self._require_value(proxy, operation, Specialize.ITER_LEN, "len"))
        self.decide(Decision(proxy, GuardKind.LEN, self._flag_for(proxy, Specialize.ITER_LEN), length, (length,), f"len({text})",
                             operation, key=(proxy.node, "length")))
        return length

    def iter(self, obj: Any, frame: Optional[types.FrameType] = None) -> Iterator[Any]:
        """Called for ``iter(proxy)``: loops, unpacking, ``*proxy``, ``tuple(proxy)``; ``frame`` is
        the frame that iterates (given by ``ValueProxy.__iter__``; torch.fx's proxies give none:
        then it is the innermost frame of user code)."""
        if self._evaluating:
            raise Unevaluable()
        frame = frame if frame is not None else user_frame()
        count = unpack_count(frame)
        value = value_of(obj)
        text = self.describe(obj)
        if value is MISSING:
            if count is not None:  # what torch.fx does: the code fixes the count
                return (obj[i] for i in range(count))
            self.refuse(_messages.no_value_error(f"iterating over `{text}`", Specialize.ITER_LEN, user_location(), text))
        mapping = state_of(obj).mapping
        if isinstance(value, dict) or mapping is not None:
            return self._iterate_mapping(obj, value, mapping)
        length = len(value)
        # `a, b = t` is fixed by the code itself (eager raises on another length): always allowed.
        kind, flag = ((GuardKind.UNPACK, Specialize.NONE) if count is not None
                      else (GuardKind.ITER, self._flag_for(obj, Specialize.ITER_LEN)))
        self.decide(Decision(obj, kind, flag, length, (length,), f"len({text})",
                             f"iterating over `{text}` (a loop, *{text}, tuple() or list())",
                             key=(obj.node, "length")))
        if count is None:
            return (obj[i] for i in range(length))
        # A None that the unpacking discards (`out, _ = attention(x, x, x, need_weights=False)`)
        # decides nothing: no node, no guard (a guard would be its one use, and graph passes that
        # ask whether a module's output element is used, Brevitas' quantize, would quantize None).
        discarded = unpack_discards(frame)
        return (None if i in discarded and value[i] is None else obj[i] for i in range(length))

    def _iterate_mapping(self, proxy: ValueProxy, value: Any, mapping: Optional[ValueProxy]) -> Iterator[Any]:
        source = mapping if mapping is not None else proxy
        keys = tuple(value_of(source).keys())
        # The keys of `**kwargs` are the caller's choice, fixed by the call (like `a, b = t`).
        caller_keys = source.node.op == "placeholder" and str(source.node.target).startswith("**")
        flag = Specialize.NONE if caller_keys else Specialize.ITER_LEN
        text = self.describe(source)
        self.decide(Decision(source, GuardKind.KEYS, flag, keys, (keys,), f"tuple({text}.keys())",
                             f"iterating over `{self.describe(proxy)}` (its keys)", key=(source.node, "keys")))
        view = proxy.node.target if mapping is not None else "keys"
        if view == "values":
            return (source[k] for k in keys)
        if view == "items":
            return ((k, source[k]) for k in keys)
        return iter(keys)

    def resolve_number(self, proxy: ValueProxy, conversion: str, frame: Optional[types.FrameType] = None) -> Any:
        """Called for ``int(proxy)``, ``float(proxy)`` and ``operator.index(proxy)``
        (``range(n)``, list indexing): SHAPES for values computed from shapes, else SCALARS."""
        kind, convert, spelled = _CONVERSIONS[conversion]
        if self._message_sink(frame) is not None:  # `"%d" % n` for a message: not a decision
            return convert(value_of(proxy))
        text = self.describe(proxy)
        operation = f"{spelled}() of `{text}`"
        flag = Specialize.SHAPES if state_of(proxy).from_shapes else Specialize.SCALARS
        value = self._require_value(proxy, operation, flag, conversion)
        if self._decided_as_size(proxy, value):
            return convert(value)
        number = None if _is_meta(value) else convert(value)
        self.decide(Decision(proxy, kind, flag, number, (number,), f"{spelled}({text})", operation,
                             needs_data=isinstance(value, torch.Tensor), fix=_config_fix(proxy, value)))
        return number

    def resolve_format(self, proxy: ValueProxy, spec: str, frame: Optional[types.FrameType] = None) -> str:
        """Called for ``format(proxy)`` (f-strings): the value's text, a SHAPES decision for
        values computed from shapes, else SCALARS, guarded on the value; free when the text
        only feeds a message (``torch._assert``, an exception, a warning: _message_flow.py)."""
        sink = self._message_sink(frame)
        if sink is not None:
            text = format(value_of(proxy), spec)
            if sink != GRAPH:
                return text
            self.message_values.append((proxy, spec))  # formatted at run time by the graph
            return placeholder(len(self.message_values) - 1, text)
        text = self.describe(proxy)
        operation = f"formatting `{text}`"
        flag = Specialize.SHAPES if state_of(proxy).from_shapes else Specialize.SCALARS
        value = self._require_value(proxy, operation, flag, "format")
        if self._decided_as_size(proxy, value):
            return format(value, spec)
        if isinstance(value, torch.Tensor):
            value = value.tolist() if not _is_meta(value) else None  # guarded as Python values
            proxy = self._call(torch.Tensor.tolist, proxy)
        self.decide(Decision(proxy, GuardKind.VALUE, flag, value, (fingerprint(value),), text, operation,
                             needs_data=True))
        return format(value, spec)

    def resolve_hash(self, proxy: ValueProxy) -> int:
        """Called for ``hash(proxy)`` of a traced Python value (a dict or set lookup such as
        ``TABLE.get(n)``): the value's hash, a SHAPES decision for values computed from
        shapes, else SCALARS, guarded on the value."""
        text = self.describe(proxy)
        operation = f"hashing `{text}` (a dict or set lookup)"
        flag = Specialize.SHAPES if state_of(proxy).from_shapes else Specialize.SCALARS
        value = self._require_value(proxy, operation, flag, "hash")
        if self._decided_as_size(proxy, value):
            return hash(value)
        self.decide(Decision(proxy, GuardKind.VALUE, flag, value, (fingerprint(value),), text, operation))
        return hash(value)

    def resolve_contains(self, proxy: ValueProxy, item: Any) -> bool:
        """Called for ``item in proxy``: recorded as ``operator.contains`` and decided as a BOOL."""
        self._require_value(proxy, f"`... in {self.describe(proxy)}`", Specialize.BOOL, "contains")
        return self.to_bool(self.create_proxy("call_function", operator.contains, (proxy, item), {}))

    def record_setitem(self, proxy: ValueProxy, index: Any, value: Any) -> None:
        """Called for ``proxy[index] = value``: an ``operator.setitem`` node (applied to the value too)."""
        self.create_proxy("call_function", operator.setitem, (proxy, index, value), {})

    def getitem(self, proxy: ValueProxy, index: Any) -> Any:
        """Called for ``proxy[index]``; an element that is ``None`` is returned as ``None`` (guarded)."""
        result = self.create_proxy("call_function", operator.getitem, (proxy, index), {})
        if type(result) is ValueProxy and value_of(result) is None:
            return self._none(result)
        return result

    def read_attribute(self, proxy: ValueProxy, name: str, attribute: Any,
                       frame: Optional[types.FrameType] = None) -> Any:
        """Called for a tensor's ``.shape``/``.ndim`` and ``.dtype``/``.device``/... reads;
        ``frame`` is the frame that reads it (else the innermost frame of user code)."""
        if name in SHAPE_ATTRIBUTES:
            return self._read_shape(proxy, name, attribute, frame if frame is not None else user_frame())
        if name in ("dtype", "device") and self._flows_into_ops(frame):
            # `x.to(self.weight.dtype)`, `torch.zeros(n, device=x.device)`: read when the graph
            # runs, so a graph cast with .to(torch.bfloat16) or moved follows, as eager does
            symbolic = ValueAttribute(proxy, name, attribute)
            symbolic.__dict__["_specfx"] = ProxyState(attribute)
            return symbolic
        return self._read_type(proxy, name, attribute)

    def _flows_into_ops(self, frame: Optional[types.FrameType]) -> bool:
        """Whether the value ``frame`` reads only goes, as an argument, to torch's factories or to
        methods of traced tensors (both recorded in the graph); never to code that could compare it."""
        if self._evaluating or self.examples is None or frame is None:
            return False
        consumers = value_consumers(frame)
        if not consumers:
            return False
        for described in consumers:
            base = resolve_described(described.base, frame) if type(described) is Attribute else None
            if type(base) is ValueProxy and isinstance(value_of(base), torch.Tensor):
                continue  # a method of a traced tensor: a node
            if base is torch and described.name in FACTORIES:
                continue  # torch.zeros(..., device=x.device): a factory the graph records
            return False  # anything else may need the value itself (torch.finfo(x.dtype), x.dtype == ...)
        return True

    def _read_type(self, proxy: ValueProxy, name: str, attribute: Any) -> Any:
        """``proxy.dtype`` / ``.device`` / ``.layout`` (and ``is_floating_point()``,
        ``is_sparse``...) follow from the input types, so they are read as values, as every
        tracer does, and guarded (a float16 input then fails loudly); ``requires_grad``
        and ``is_leaf`` are read from a node and guarded."""
        tensor = value_of(proxy)
        text = self.describe(proxy)
        if name in ("requires_grad", "is_leaf"):
            node = self._call(getattr, proxy, name)
            self.decide(Decision(node, GuardKind.VALUE, Specialize.NONE, attribute, (attribute,), f"{text}.{name}",
                                 f"`{text}.{name}`"))
            return attribute
        if name in ("layout", "is_sparse"):
            kind, observed, expected = GuardKind.LAYOUT, tensor.layout, str(tensor.layout)
        elif name in ("device", "is_cuda", "is_meta", "get_device"):
            kind, observed, expected = GuardKind.DEVICE, tensor.device, tensor.device
        else:
            kind, observed, expected = GuardKind.DTYPE, tensor.dtype, tensor.dtype
        self.decide(Decision(proxy, kind, Specialize.NONE, observed, (expected,), f"{text}.{kind}",
                             f"`{text}.{name}`", key=(proxy.node, kind)))
        return attribute

    def none_attribute(self, proxy: ValueProxy, name: str) -> None:
        """Called for an attribute whose value is None (``x.grad``): None in the code, guarded."""
        return self._none(self._call(getattr, proxy, name))

    def assign_attribute(self, proxy: ValueProxy, name: str, value: Any) -> None:
        """Called for ``proxy.name = value`` in traced code: refused where a graph cannot
        repeat it (an attribute of an input or of a model tensor; ``.data``, ``.grad`` or
        ``.requires_grad`` of any tensor); else it stays on the traced value (read back later,
        as eager reads back an attribute set on a tensor forward made)."""
        if self._evaluating or not self.records_factories():
            return
        node = proxy.node
        if is_input_path(node):
            what = "an input"
        elif node.op == "get_attr":
            what = "a tensor of the model"
        elif name in _messages.TENSOR_STATE and isinstance(value_of(proxy), torch.Tensor):
            what = "a tensor"
        else:
            return
        location = user_location()
        self.refuse(SpecializationError(_messages.attribute_write(self.describe(proxy), name, what, location),
                                        operation=f"{self.describe(proxy)}.{name} = ...",
                                        location=str(location) if location else None))

    def refuse_input_writes(self, root_fn: Callable[..., Any], writes: Any) -> None:
        """Called when forward has returned having written to the lists or dicts it was given."""
        location = definition_line(root_fn)
        self.refuse(SpecializationError(_messages.input_container_writes(writes, location),
                                        operation="a write to an input container",
                                        location=str(location) if location else None))

    def note_python_attribute(self, proxy: ValueProxy, name: str, present: bool) -> None:
        """Called when the code asks an input for an attribute it lacks (``getattr(x, "scale",
        1.0)`` takes its fallback) or for a Python attribute of the example tensor: guard
        that inputs lack it, or have it, too."""
        if name.startswith("__") or self._evaluating or not is_input_path(proxy.node):
            return
        # (named where the model's code holds it: the asker may be torch's own code, such as
        # nn.Parameter's isinstance check reading `instance._is_param`)
        asker: Optional[types.FrameType] = sys._getframe(1)
        while asker is not None and not is_user_file(asker.f_code.co_filename):
            asker = asker.f_back
        text = self.describe(proxy, asker)
        self.decide(Decision(proxy, GuardKind.HAS_ATTR, Specialize.NONE, present, (name, present),
                             f"hasattr({text}, {name!r})", f"`{text}.{name}`"))

    def _read_shape(self, proxy: ValueProxy, name: str, attribute: Any, frame: Optional[types.FrameType]) -> Any:
        """``proxy.shape`` / ``proxy.ndim``: ints under SHAPES, else a symbolic node. Under
        SHAPES too, a shape unpacked into names (``n, c, h, w = x.shape``) or read for a
        message only stays symbolic: each name is decided (as that dimension) where the code
        needs it as an int, so only the dims used are guarded."""
        if (not self._shapes_allowed(proxy) or (name != "ndim" and self._defers_shapes(proxy))
                or (name == "shape" and self._symbolic_shape(proxy, frame))):
            symbolic = ValueAttribute(proxy, name, attribute)
            symbolic.__dict__["_specfx"] = ProxyState(attribute, from_shapes=True)
            return symbolic
        text = self.describe(proxy)
        if name == "ndim":
            self._decide_shape(proxy, GuardKind.NDIM, attribute, f"{text}.ndim", (attribute,))
            return attribute
        dim = constant_subscript_next(frame)
        if dim is not None and -len(attribute) <= dim < len(attribute):
            # `w.shape[1]` reads one dimension: guard that one, as w.size(1) does
            self._decide_shape(proxy, GuardKind.SIZE, attribute[dim], f"{text}.size({dim})", (dim, attribute[dim]))
        else:
            self._decide_shape(proxy, GuardKind.SHAPE, tuple(attribute), f"{text}.shape", (tuple(attribute),))
        return attribute

    def call_method(self, root: ValueProxy, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                    frame: Optional[types.FrameType] = None) -> Any:
        """Called for ``proxy.name(...)``: shape methods under SHAPES and
        ``.item()``/``.tolist()`` under SCALARS return Python values; all else is a node.
        ``frame`` is the frame that calls it (else the innermost frame of user code)."""
        value = value_of(root)
        if isinstance(value, torch.Tensor) and name in TYPE_METHODS:
            return self._read_type(root, name, getattr(value, name)(*args, **kwargs))
        if isinstance(value, torch.Tensor) and not any(True for _ in proxies_in(args, kwargs)):
            if name in SHAPE_METHODS and self._shapes_allowed(root) and not (
                    (name != "dim" and self._defers_shapes(root))
                    or (name == "size" and self._symbolic_shape(root, frame))):
                return self._read_shape_method(root, name, value, args, kwargs)
            if name in SCALAR_METHODS and Specialize.SCALARS in self._resolved().flags:
                result = None if _is_meta(value) else getattr(value, name)(*args, **kwargs)
                text = f"{self.describe(root)}.{name}()"
                self.decide(Decision(root, GuardKind(name), Specialize.SCALARS, result, (result,), text,
                                     f"`{text}`", needs_data=True))
                return result
        if name == "backward" and isinstance(value, torch.Tensor):
            location = user_location()
            what = f"{self.describe(root)}.backward()"
            self.refuse(SpecializationError(_messages.backward_in_forward(what, location), operation=what,
                                            location=str(location) if location else None))
        if name in GRADIENT_HOOKS and isinstance(value, torch.Tensor) and args and callable(args[0]):
            args = (self._held_hook(root, name, args[0]), *args[1:])
        return self.create_proxy("call_method", name, (root,) + tuple(args), kwargs)

    def _held_hook(self, root: ValueProxy, name: str, hook: Any) -> Any:
        """``y.register_hook(hook)``: the graph holds ``hook`` and registers it on its own ``y`` at
        every call, as eager does; a hook that holds a traced value (a closure over another
        tensor of this forward) would hold the trace's proxy, so it is refused."""
        held = _traced_values_held(hook)
        if held is not None:
            location = user_location()
            self.refuse(SpecializationError(
                _messages.hook_holds_traced_value(self.describe(root), name, held, location),
                operation=f"{self.describe(root)}.{name}()", location=str(location) if location else None))
        return self.constant_proxy(hook, "_hook_")

    def _read_shape_method(
        self, root: ValueProxy, name: str, value: torch.Tensor, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Any:
        result = getattr(value, name)(*args, **kwargs)
        text = self.describe(root)
        dims = args or tuple(kwargs.values())
        if name == "size" and dims:
            self._decide_shape(root, GuardKind.SIZE, result, f"{text}.size({dims[0]})", (dims[0], result))
        elif name == "size":
            self._decide_shape(root, GuardKind.SHAPE, tuple(result), f"{text}.shape", (tuple(result),))
        else:
            spelled = f"{text}.ndim" if name == "dim" else f"{text}.numel()"
            self._decide_shape(root, _SHAPE_METHOD_KINDS[name], result, spelled, (result,))
        return result

    def _symbolic_shape(self, proxy: ValueProxy, frame: Optional[types.FrameType]) -> bool:
        """Whether a shape read (``x.shape``, ``x.size()``, ``x.size(d)``) that SHAPES grants
        stays symbolic: unpacked into names at once, stored into a name (``n = x.shape[0]``,
        ``b = x.size(0)``, ``new_shape = x.size()[:-2] + (h,)``), or only formatted into a
        message. A name is decided (one dimension as that dimension) where the code needs a
        Python answer; until then it is a size read when the graph runs (``x.expand(n, -1)``,
        ``x.view(new_shape)``)."""
        if _is_parameter_node(proxy) or self._evaluating:
            return False
        frame = frame if frame is not None else user_frame()
        if frame is None:
            return False
        return unpacked_next(frame) or only_stored(frame) or self._message_sink(frame) is not None

    def _decided_as_size(self, proxy: ValueProxy, value: Any) -> bool:
        """A value that is one dimension of a tensor (``h`` of ``n, c, h, w = x.shape``), read
        as a Python value under SHAPES: decided and guarded as that dimension, ``x.size(2) == h``."""
        dim = state_of(proxy).dim
        if (dim is None or dim[1] is None or type(value) is not int
                or Specialize.SHAPES not in self._resolved().flags):
            return False  # (not granted: refused below, naming the operation)
        tensor, index = dim
        self._decide_shape(tensor, GuardKind.SIZE, value, f"{self.describe(tensor)}.size({index})", (index, value))
        return True

    def _shapes_allowed(self, proxy: ValueProxy) -> bool:
        resolved = self._resolved()
        return Specialize.SHAPES in resolved.flags or (resolved.param_shapes_constant and _is_parameter_node(proxy))

    @staticmethod
    def _defers_shapes(proxy: ValueProxy) -> bool:
        """Whether this shape read stays symbolic (see deferred_shapes)."""
        return _DEFER_SHAPES.get() and not _is_parameter_node(proxy)

    def _decide_shape(
        self, proxy: ValueProxy, kind: GuardKind, value: Any, expression: str, expected: Tuple[Any, ...]
    ) -> None:
        self.decide(Decision(proxy, kind, Specialize.SHAPES, value, expected, expression, f"`{expression}`",
                             by_parameters=_is_parameter_node(proxy)))

    def note_type_read(self, proxy: ValueProxy, frame: types.FrameType) -> None:
        """Called when user code (``frame``) asks ``isinstance`` (or ``torch.is_tensor``) of
        an input (see _type_reads.py): guard that its class stays the same."""
        if (type(proxy) is not ValueProxy or not is_input_path(proxy.node)
                or self.decisions.decided((proxy.node, GuardKind.TYPE), proxy)):
            return
        location = SourceLocation(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        # (named in the asking code: the innermost frame may be torch's, torch.is_tensor(obj) or
        # nn.Parameter's __instancecheck__(self, instance), whose names mean nothing to the user)
        text = self.describe(proxy, frame)
        name = type_name(value_of(proxy))  # the exact class: a Parameter, a list or a tuple, an int or a float
        self.decide(Decision(proxy, GuardKind.TYPE, Specialize.NONE, name, (name,), text,
                             f"isinstance() of `{text}`", key=(proxy.node, GuardKind.TYPE), location=location))


# Tensor methods that register a function autograd calls in backward: the graph registers it anew.
GRADIENT_HOOKS = frozenset({"register_hook", "register_post_accumulate_grad_hook"})


def _traced_values_held(function: Any) -> Optional[str]:
    """The name of a closure variable or default of ``function`` that holds a traced value, if any."""
    code = getattr(function, "__code__", None)
    cells = getattr(function, "__closure__", None) or ()
    names = list(code.co_freevars) if code is not None else []
    for name, cell in zip(names, cells):
        try:
            contents = cell.cell_contents
        except ValueError:
            continue
        if any(isinstance(v, Proxy) for v in (contents, *(contents if isinstance(contents, (list, tuple)) else ()))):
            return name
    defaults = (getattr(function, "__defaults__", None) or ()) + tuple((getattr(function, "__kwdefaults__", None) or {}).values())
    if any(isinstance(v, Proxy) for v in defaults):
        return "a default argument"
    return None


def _is_parameter_node(proxy: ValueProxy) -> bool:
    return type(proxy) is ValueProxy and proxy.node.op == "get_attr" and isinstance(
        value_of(proxy), torch.nn.Parameter
    )


def _config_fix(proxy: ValueProxy, value: Any) -> Optional[str]:
    if type(proxy) is ValueProxy and proxy.node.op == "placeholder" and not isinstance(value, torch.Tensor):
        return f"bake the input in with {spelling().concrete(str(proxy.node.target), value)}"
    return None
