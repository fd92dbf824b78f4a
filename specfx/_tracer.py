"""``SpecTracer``: a ``torch.fx.Tracer`` whose proxies carry example values.

Each node's concrete value is computed alongside the graph by running the op
on the concrete values of its inputs. Value-demanding dunders arrive here
(``resolve_*``); the tracer asks the policy in force (its base policy, the
``scopes`` of the submodules being traced and ``@specialize`` annotations)
and either bakes the value in, recording a :class:`Specialization` and
emitting a guard node, or raises :class:`SpecializationError`.

Without example inputs nothing carries a value and the tracer records the
same graph ``torch.fx.symbolic_trace`` does.
"""

from __future__ import annotations

import builtins
import contextvars
import dis
import inspect
import linecache
import math
import operator
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

import torch
import torch.fx
from torch.fx.node import Node
from torch.fx.proxy import Proxy

from . import _messages, _patches
from ._guards import GUARDS, Specialization
from ._policy import Layer, Policy, Resolved, Specialize, resolve
from ._scope import annotations_active, current_layers, fresh_layers, push_layer, reset_layers
from ._evaluation import Unevaluable, concrete_values, mark_provenance, proxies_in, run_op, tensor_meta
from ._source import SourceLocation, user_location
from ._values import (
    MISSING,
    SCALAR_METHODS,
    SHAPE_METHODS,
    TYPE_METHODS,
    ValueAttribute,
    ValueProxy,
    traced_isinstance,
    value_of,
)

__all__ = ["SpecTracer"]

# torch.fx patches torch.nn.Module globally while it traces, so traces are
# serialized; code in other threads keeps running eagerly (see `_is_tracing`).
_TRACE_LOCK = threading.RLock()
_ACTIVE_TRACER: contextvars.ContextVar[Optional["SpecTracer"]] = contextvars.ContextVar(
    "specfx_active_tracer", default=None
)

_VIEW_METHODS = frozenset({"keys", "values", "items"})
# Constants that torch.fx's Tracer.create_arg returns unchanged after several type checks.
_PLAIN_ARGUMENT_TYPES = frozenset(
    {int, float, bool, str, complex, type(None), type(...), torch.dtype, torch.device, torch.memory_format,
     torch.layout}
)


def _instructions(code: types.CodeType) -> Tuple[list, Dict[int, int]]:
    """The code's instructions and offset -> position, cached per code object."""
    cached = _INSTRUCTIONS.get(code)
    if cached is None:
        listing = list(dis.get_instructions(code))
        cached = _INSTRUCTIONS[code] = (listing, {inst.offset: i for i, inst in enumerate(listing)})
    return cached


def _constant_subscript_next(frame: types.FrameType) -> Optional[int]:
    """``k`` when the frame's next operation is ``[k]`` with a constant int (``x.shape[1]``)."""
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    if index is None or index + 2 >= len(listing):
        return None
    load, subscript = listing[index + 1], listing[index + 2]
    if load.opname == "LOAD_CONST" and type(load.argval) is int and subscript.opname == "BINARY_SUBSCR":
        return load.argval
    return None


def _instruction_at(frame: types.FrameType) -> Optional[dis.Instruction]:
    """The instruction the frame is executing (e.g. ``UNPACK_SEQUENCE``)."""
    listing, position = _instructions(frame.f_code)
    index = position.get(frame.f_lasti)
    return None if index is None else listing[index]


_INSTRUCTIONS: Dict[types.CodeType, Tuple[list, Dict[int, int]]] = {}


def _is_meta(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "meta"


class SpecTracer(torch.fx.Tracer):
    """A value-carrying ``torch.fx.Tracer``; use :func:`specfx.trace` to drive it.

    Constructed with no arguments it behaves like ``torch.fx.Tracer`` (this is
    what unpickling a GraphModule does). ``policy``, ``leaf_modules`` and
    ``guards`` are keyword-only extras; example values are given to
    :meth:`set_examples` before :meth:`trace`.

    >>> import torch, specfx
    >>> graph = specfx.SpecTracer().trace(torch.nn.Sequential(torch.nn.ReLU()))
    >>> [n.op for n in graph.nodes]
    ['placeholder', 'call_module', 'output']
    """

    def __init__(
        self,
        autowrap_modules: Tuple[types.ModuleType, ...] = (math,),
        autowrap_functions: Tuple[Callable[..., Any], ...] = (),
        param_shapes_constant: bool = False,
        *,
        policy: Optional[Policy] = None,
        leaf_modules: Optional[Iterable[Any]] = None,
        guards: bool = True,
    ) -> None:
        super().__init__(autowrap_modules, autowrap_functions, param_shapes_constant)
        policy = policy if policy is not None else Policy()
        if param_shapes_constant:
            policy = policy | Policy(param_shapes_constant=True)
        self.policy = policy
        self.guards = guards
        self._leaf_types = tuple(m for m in (leaf_modules or ()) if isinstance(m, type))
        self._leaf_names = frozenset(m for m in (leaf_modules or ()) if isinstance(m, str))
        self.examples: Optional[Dict[str, Any]] = None
        self.specializations: list[Specialization] = []
        self.protect: Callable[[Any], None] = lambda value: None
        self._decided: set[Tuple[Any, ...]] = set()
        self._module_path: list[str] = []
        self._evaluating = 0
        self._state_names: Optional[Dict[int, str]] = None  # id of a parameter/buffer -> qualified name
        self._base_layer = Layer(self.policy, f"trace(policy={self.policy!r})")
        self._concrete_names: frozenset = frozenset()

    def set_examples(self, examples: Optional[Dict[str, Any]]) -> None:
        """Give the example value of each placeholder by name (``*args``/``**kwargs``
        under ``"*name"``/``"**name"``); ``None`` traces symbolically."""
        self.examples = examples

    # -- driving the trace -------------------------------------------------------------

    def trace(self, root: Any, concrete_args: Optional[Dict[str, Any]] = None) -> torch.fx.Graph:
        """Trace ``root`` as ``torch.fx.Tracer.trace`` does, with this tracer's values and policy."""
        with _TRACE_LOCK:
            active = _ACTIVE_TRACER.set(self)
            annotations = annotations_active().set(self.policy.annotations)
            token = fresh_layers()
            self._concrete_names = frozenset(concrete_args or ())
            try:
                with _patches.tracing():
                    # With values, Python-level isinstance() answers as a proxy's value does, in
                    # model code and library helpers alike (transformers checks `isinstance(mask,
                    # torch.Tensor)` in its mask utilities). C code keeps the real answer: a Proxy
                    # is never taken for a tensor there. Other threads keep the previous isinstance.
                    if self.examples is not None:
                        _patches.patch(builtins, "isinstance", traced_isinstance)
                    _patches.confine_fx_tracing_flag()
                    return super().trace(root, concrete_args)
            finally:
                reset_layers(token)
                annotations_active().reset(annotations)
                _ACTIVE_TRACER.reset(active)

    def _is_tracing(self) -> bool:
        # False in other threads (FX's patches are global) and while evaluating values.
        return self._evaluating == 0 and _ACTIVE_TRACER.get() is self

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        """Called for each submodule call: leaf modules become ``call_module`` nodes
        (``leaf_modules`` types or qualified names, plus torch.fx's defaults)."""
        if self._leaf_types and isinstance(m, self._leaf_types):
            return True
        if module_qualified_name in self._leaf_names:
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Any:
        """Called for each submodule call: pushes the ``scopes`` policy that
        matches the submodule's qualified name while it is traced."""
        if not self._is_tracing():
            return forward(*args, **kwargs)
        qualname = self.path_of_module(m)
        match = self.policy.scope_match(qualname)
        token = (
            push_layer(Layer(match[1], f"scopes[{match[0]!r}] (module {qualname})")) if match else None
        )
        self._module_path.append(qualname)
        try:
            result = super().call_module(m, forward, args, kwargs)
            if type(result) is ValueProxy and result.node.op == "call_module" and value_of(result) is None:
                # a leaf that returned None (no mask, no cache): None in the code, as in eager
                self._decide(result, "is_none", Specialize.NONE, True, _name(result), (True,),
                             operation=f"`{_name(result)}`")
                return None
            return result
        finally:
            self._module_path.pop()
            if token is not None:
                reset_layers(token)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: Dict[str, Any]) -> Any:
        """Called for module attribute reads: parameters become ``get_attr``
        proxies carrying the parameter. With example inputs buffers do too, so
        that ``self.position_ids[:, :seq_len]`` and decisions on buffers stay in
        the graph (without examples buffers stay tensors, as in torch.fx)."""
        if self._evaluating or not isinstance(attr_val, torch.Tensor) or not self._is_tracing():
            return attr_val  # (reads inside leaf modules being run come first: they are the many)
        if self._state_names is None:
            self._state_names = {id(p): n for n, p in self.root.named_parameters()}
            self._state_names.update({id(b): n for n, b in self.root.named_buffers()})
        is_parameter = isinstance(attr_val, torch.nn.Parameter)
        name = self._state_names.get(id(attr_val))
        if name is None or not (is_parameter or self.examples is not None or self.proxy_buffer_attributes):
            return attr_val
        proxy = parameter_proxy_cache.get(name)
        if proxy is None:
            proxy = parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
        return proxy

    def proxy(self, node: Node) -> ValueProxy:
        """Called to wrap each new node: specfx proxies carry values."""
        return ValueProxy(node, self)

    def create_arg(self, a: Any) -> Any:
        """Called to turn arguments into graph arguments; a proxy is its node
        (checked first: a proxy answers ``isinstance`` as its value does)."""
        if isinstance(a, Proxy):
            return a.node
        if type(a) in _PLAIN_ARGUMENT_TYPES:  # torch.fx's Tracer checks these slowly, for nothing
            return a
        return super().create_arg(a)

    def create_args_for_root(self, root_fn: Callable[..., Any], is_module: bool, concrete_args: Any = None) -> Any:
        """Called once to make the placeholders; an example that is ``None``
        is passed to the code as ``None`` (so ``x is None`` answers truly) and guarded."""
        fn, args = super().create_args_for_root(root_fn, is_module, concrete_args)
        _put_varargs_before_keyword_only(self.graph, root_fn)
        if self.examples is None:
            return fn, args
        where = _definition_line(root_fn)
        new_args = []
        for arg in args:
            if type(arg) is ValueProxy and arg.node.op == "placeholder" and value_of(arg) is None:
                self._decide(arg, "is_none", Specialize.NONE, True, arg.node.name,
                             (True,), operation=f"`{arg.node.name}`", location=where)
                arg = None
            new_args.append(arg)
        return fn, new_args

    # -- values ----------------------------------------------------------------------------

    def create_proxy(
        self,
        kind: str,
        target: Any,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        name: Optional[str] = None,
        type_expr: Optional[Any] = None,
        proxy_factory_fn: Optional[Callable[[Node], Proxy]] = None,
    ) -> Proxy:
        """Called for every new node: computes the node's concrete value first
        (so a failing op leaves no node behind) and attaches it to the proxy."""
        if self._evaluating:
            raise Unevaluable()
        value = self._evaluate(kind, target, args, kwargs)
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if type(proxy) is not ValueProxy:
            return proxy
        state = proxy.__dict__
        mark_provenance(state, kind, target, args, kwargs, value)
        if value is MISSING:
            return proxy
        state["_specfx_value"] = value
        if kind == "call_method" and target in _VIEW_METHODS and isinstance(value_of(args[0]), dict):
            state["_specfx_mapping"] = args[0]
        meta = tensor_meta(value)
        if meta is not None:
            proxy.node.meta["tensor_meta"] = meta
        proxy.node.meta["type"] = type(value)
        return proxy

    def _evaluate(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if kind == "placeholder":
            if self.examples is None:
                return MISSING
            if target in self.examples:
                return self.examples[target]
            if any(target.startswith(name + "_") for name in self._concrete_names):
                return MISSING  # torch.fx's stand-in for a concrete arg, only there to be checked
            return args[0] if args else MISSING
        if kind == "output" or (self.examples is None and kind != "get_attr"):
            # Without examples nothing runs, as in torch.fx; parameters still carry
            # themselves so that param_shapes_constant can read their shapes.
            return MISSING
        values = concrete_values(args, kwargs)
        if values is None:
            return MISSING
        self._evaluating += 1
        try:
            return run_op(self.root, kind, target, values[0], values[1], self.protect)
        except Unevaluable:
            return MISSING
        finally:
            self._evaluating -= 1

    # -- decisions -------------------------------------------------------------------------

    def _resolved(self) -> Resolved:
        return resolve((self._base_layer,) + current_layers())

    def _decide(
        self,
        proxy: ValueProxy,
        kind: str,
        flag: Specialize,
        value: Any,
        expression: str,
        guard_args: Tuple[Any, ...],
        *,
        operation: str,
        allowed_by_params: bool = False,
        needs_data: bool = False,
        dedupe: Optional[Tuple[Any, ...]] = None,
        location: Optional[SourceLocation] = None,
        extra_fix: Optional[str] = None,
    ) -> None:
        """Check ``flag`` against the policy in force, then record the
        specialization and emit its guard (once per node and property)."""
        if self._evaluating:
            raise Unevaluable()
        if location is None:
            location = user_location()
        resolved = self._resolved()
        granted = flag is Specialize.NONE or flag in resolved.flags
        if not granted and not allowed_by_params:
            raise _messages.denied_error(
                operation, flag, value, location, resolved, self._current_module(), extra_fix, kind
            )
        if needs_data and _is_meta(value_of(proxy)):
            raise _messages.meta_error(operation, flag, location, _name(proxy), kind)
        key = dedupe if dedupe is not None else (proxy.node, kind, guard_args[:-1])
        if key in self._decided:
            return
        self._decided.add(key)
        guard_name = None
        if self.guards:
            where = location.describe() if location else "<unknown location>"
            node = self.create_node(
                "call_function", GUARDS[kind], (proxy.node, *guard_args, expression, where), {}
            )
            guard_name = node.name
        self.specializations.append(
            Specialization(
                kind=kind,
                flag=flag if granted else Specialize.NONE,  # else allowed by param_shapes_constant alone
                value=value,
                expression=expression,
                node=proxy.node.name,
                location=location,
                module=self._current_module(),
                guard=guard_name,
                degenerate=_is_degenerate(proxy, kind, value),
            )
        )

    def _current_module(self) -> str:
        return self._module_path[-1] if self._module_path else ""

    def _require_value(self, proxy: ValueProxy, operation: str, flag: Specialize, kind: str) -> Any:
        if self._evaluating:
            raise Unevaluable()
        value = value_of(proxy)
        if value is MISSING:
            raise _messages.no_value_error(operation, flag, user_location(), _name(proxy), kind)
        return value

    def resolve_bool(self, proxy: ValueProxy) -> bool:
        """Called for ``bool(proxy)`` (``if``, ``while``, ``and``/``or``/``not``, ``assert``)."""
        operation = f"bool() of `{_name(proxy)}`"
        value = self._require_value(proxy, operation, Specialize.BOOL, "bool")
        truth = None if _is_meta(value) else bool(value)
        self._decide(proxy, "bool", Specialize.BOOL, truth, f"bool({_name(proxy)})", (truth,),
                     operation=operation, needs_data=isinstance(value, torch.Tensor),
                     extra_fix=_config_fix(proxy, value))
        return bool(truth)

    def resolve_len(self, proxy: ValueProxy) -> int:
        """Called for ``len(proxy)``."""
        operation = f"len() of `{_name(proxy)}`"
        value = self._require_value(proxy, operation, Specialize.ITER_LEN, "len")
        length = len(value)
        self._decide(proxy, "len", Specialize.ITER_LEN, length, f"len({_name(proxy)})", (length,),
                     operation=operation, dedupe=(proxy.node, "length"))
        return length

    def resolve_iter(self, proxy: ValueProxy, frame: types.FrameType) -> Iterator[Any]:
        """Called for ``iter(proxy)``: loops, unpacking, ``*proxy``, ``tuple(proxy)``."""
        if self._evaluating:
            raise Unevaluable()
        instruction = _instruction_at(frame)
        unpacking = instruction is not None and instruction.opname == "UNPACK_SEQUENCE"
        value = value_of(proxy)
        if value is MISSING:
            if unpacking:  # what torch.fx does: the code fixes the count
                return (proxy[i] for i in range(instruction.argval))
            raise _messages.no_value_error(f"iterating over `{_name(proxy)}`", Specialize.ITER_LEN,
                                           user_location(), proxy.node.name)
        mapping = proxy.__dict__.get("_specfx_mapping")
        if isinstance(value, dict) or mapping is not None:
            return self._iterate_mapping(proxy, value, mapping)
        length = len(value)
        # `a, b = t` is fixed by the code itself (eager raises on another length): always allowed.
        kind, flag = ("unpack", Specialize.NONE) if unpacking else ("iter", Specialize.ITER_LEN)
        self._decide(proxy, kind, flag, length, f"len({_name(proxy)})", (length,),
                     operation=f"iterating over `{_name(proxy)}` (a loop, *{_name(proxy)}, tuple() or list())",
                     dedupe=(proxy.node, "length"))
        return (proxy[i] for i in range(length))

    def _iterate_mapping(self, proxy: ValueProxy, value: Any, mapping: Optional[ValueProxy]) -> Iterator[Any]:
        source = mapping if mapping is not None else proxy
        keys = tuple(value_of(source).keys())
        # The keys of `**kwargs` are the caller's choice, fixed by the call (like `a, b = t`).
        caller_keys = source.node.op == "placeholder" and str(source.node.target).startswith("**")
        flag = Specialize.NONE if caller_keys else Specialize.ITER_LEN
        self._decide(source, "keys", flag, keys, f"keys of {_name(source)}", (keys,),
                     operation=f"iterating over `{_name(proxy)}` (its keys)", dedupe=(source.node, "keys"))
        view = proxy.node.target if mapping is not None else "keys"
        if view == "values":
            return (source[k] for k in keys)
        if view == "items":
            return ((k, source[k]) for k in keys)
        return iter(keys)

    def resolve_number(self, proxy: ValueProxy, conversion: str) -> Any:
        """Called for ``int(proxy)``, ``float(proxy)`` and ``operator.index(proxy)``
        (``range(n)``, list indexing): SHAPES for values computed from shapes, else SCALARS."""
        operation = f"{'operator.index' if conversion == 'index' else conversion}() of `{_name(proxy)}`"
        from_shapes = bool(proxy.__dict__.get("_specfx_shape", False))
        flag = Specialize.SHAPES if from_shapes else Specialize.SCALARS
        value = self._require_value(proxy, operation, flag, conversion)
        number = None if _is_meta(value) else {"int": int, "float": float, "index": operator.index}[conversion](value)
        self._decide(proxy, conversion, flag, number, f"{conversion}({_name(proxy)})", (number,),
                     operation=operation, needs_data=isinstance(value, torch.Tensor),
                     extra_fix=_config_fix(proxy, value))
        return number

    def resolve_contains(self, proxy: ValueProxy, item: Any) -> bool:
        """Called for ``item in proxy``: recorded as ``operator.contains`` and decided as a BOOL."""
        self._require_value(proxy, f"`... in {_name(proxy)}`", Specialize.BOOL, "bool")
        return self.resolve_bool(self.create_proxy("call_function", operator.contains, (proxy, item), {}))

    def record_setitem(self, proxy: ValueProxy, index: Any, value: Any) -> None:
        """Called for ``proxy[index] = value``: an ``operator.setitem`` node (applied to the value too)."""
        self.create_proxy("call_function", operator.setitem, (proxy, index, value), {})

    def getitem(self, proxy: ValueProxy, index: Any) -> Any:
        """Called for ``proxy[index]``; an element that is ``None`` is returned as ``None`` (guarded)."""
        result = self.create_proxy("call_function", operator.getitem, (proxy, index), {})
        if value_of(result) is None and type(result) is ValueProxy:
            self._decide(result, "is_none", Specialize.NONE, True, _name(result), (True,),
                         operation=f"`{_name(result)}`")
            return None
        return result

    def read_type_attribute(self, proxy: ValueProxy, name: str, attribute: Any) -> Any:
        """Called for ``proxy.dtype`` / ``proxy.device`` (and ``is_floating_point()``...):
        these follow from the input types, so they are read as values, as every
        tracer does, and guarded (a float16 input then fails loudly)."""
        kind = "device" if name in ("device", "is_cuda", "is_meta") else "dtype"
        observed = value_of(proxy).device if kind == "device" else value_of(proxy).dtype
        self._decide(proxy, kind, Specialize.NONE, observed, f"{_name(proxy)}.{kind}", (observed,),
                     operation=f"`{_name(proxy)}.{name}`", dedupe=(proxy.node, kind))
        return attribute

    def read_shape_attribute(self, proxy: ValueProxy, name: str, attribute: Any) -> Any:
        """Called for ``proxy.shape`` / ``proxy.ndim``: ints under SHAPES, else a symbolic node."""
        if not self._shapes_allowed(proxy):
            symbolic = ValueAttribute(proxy, name, attribute)
            symbolic.__dict__["_specfx_shape"] = True
            return symbolic
        if name == "shape":
            dim = _constant_subscript_next(sys._getframe(2))  # the frame that wrote `x.shape`
            if dim is not None and -len(attribute) <= dim < len(attribute):
                # `x.shape[1]` reads one dimension: guard that one, as x.size(1) does
                self._decide_shape(proxy, "size", attribute[dim], f"{_name(proxy)}.size({dim})",
                                   (dim, attribute[dim]))
            else:
                self._decide_shape(proxy, "shape", tuple(attribute), f"{_name(proxy)}.shape", (tuple(attribute),))
        else:
            self._decide_shape(proxy, "ndim", attribute, f"{_name(proxy)}.ndim", (attribute,))
        return attribute

    def call_method(self, root: ValueProxy, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """Called for ``proxy.name(...)``: shape methods under SHAPES and
        ``.item()``/``.tolist()`` under SCALARS return Python values; all else is a node."""
        value = value_of(root)
        if isinstance(value, torch.Tensor) and name in TYPE_METHODS:
            return self.read_type_attribute(root, name, getattr(value, name)(*args, **kwargs))
        if isinstance(value, torch.Tensor) and not any(True for _ in proxies_in(args, kwargs)):
            if name in SHAPE_METHODS and self._shapes_allowed(root):
                result = getattr(value, name)(*args, **kwargs)
                dims = args or tuple(kwargs.values())
                if name == "size" and dims:
                    self._decide_shape(root, "size", result, f"{_name(root)}.size({dims[0]})", (dims[0], result))
                elif name == "size":
                    self._decide_shape(root, "shape", tuple(result), f"{_name(root)}.shape", (tuple(result),))
                elif name == "dim":
                    self._decide_shape(root, "ndim", result, f"{_name(root)}.ndim", (result,))
                else:
                    self._decide_shape(root, "numel", result, f"{_name(root)}.numel()", (result,))
                return result
            if name in SCALAR_METHODS and Specialize.SCALARS in self._resolved().flags:
                result = None if _is_meta(value) else getattr(value, name)(*args, **kwargs)
                self._decide(root, name, Specialize.SCALARS, result, f"{_name(root)}.{name}()", (result,),
                             operation=f"`{_name(root)}.{name}()`", needs_data=True)
                return result
        return self.create_proxy("call_method", name, (root,) + tuple(args), kwargs)

    def _shapes_allowed(self, proxy: ValueProxy) -> bool:
        resolved = self._resolved()
        return Specialize.SHAPES in resolved.flags or (resolved.param_shapes_constant and _is_parameter_node(proxy))

    def _decide_shape(self, proxy: ValueProxy, kind: str, value: Any, expression: str, guard_args: Tuple[Any, ...]) -> None:
        self._decide(proxy, kind, Specialize.SHAPES, value, expression, guard_args,
                     operation=f"`{expression}`", allowed_by_params=_is_parameter_node(proxy))

    def note_type_read(self, proxy: ValueProxy, frame: types.FrameType) -> None:
        """Called when user code (``frame``; traced_isinstance checked it is user code) asks
        ``isinstance`` of an input tensor: guard that it stays one."""
        if (type(proxy) is not ValueProxy or proxy.node.op != "placeholder"
                or not isinstance(value_of(proxy), torch.Tensor) or (proxy.node, "is_tensor") in self._decided):
            return
        location = SourceLocation(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        self._decide(proxy, "is_tensor", Specialize.NONE, True, _name(proxy),
                     (True,), operation=f"isinstance() of `{_name(proxy)}`",
                     dedupe=(proxy.node, "is_tensor"), location=location)


def _definition_line(fn: Callable[..., Any]) -> Optional[SourceLocation]:
    """The ``def`` line of ``fn`` (its code starts at the first decorator)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return None
    lineno = code.co_firstlineno
    for offset in range(50):  # skip decorator lines
        text = linecache.getline(code.co_filename, lineno + offset).lstrip()
        if text.startswith(("def ", "async def ")):
            lineno += offset
            break
    return SourceLocation(code.co_filename, lineno, getattr(code, "co_qualname", code.co_name))


def _put_varargs_before_keyword_only(graph: torch.fx.Graph, root_fn: Callable[..., Any]) -> None:
    """torch.fx creates keyword-only placeholders before ``*args``, so the generated
    ``forward(x, scale=2.0, *extra)`` would bind a positional extra to ``scale``.
    Moving the ``*args`` placeholder first gives ``forward(x, *extra, scale=2.0)``."""
    code = getattr(inspect.unwrap(root_fn), "__code__", None)
    if code is None or not code.co_kwonlyargcount or not code.co_flags & inspect.CO_VARARGS:
        return
    keyword_only = set(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    star = next((n for n in placeholders if isinstance(n.target, str) and n.target.startswith("*")
                 and not n.target.startswith("**")), None)
    first_keyword_only = next((n for n in placeholders if n.target in keyword_only), None)
    if star is not None and first_keyword_only is not None:
        first_keyword_only.prepend(star)


def _name(proxy: ValueProxy) -> str:
    node = proxy.node if type(proxy) is ValueProxy else None
    if node is None:
        return f"{_name(proxy.root)}.{proxy.attr}"  # an attribute not yet materialized
    return node.target if node.op == "get_attr" else node.name


def _is_degenerate(proxy: ValueProxy, kind: str, value: Any) -> bool:
    """Decided on a size-0/1 dimension (read as an int under SHAPES, or feeding a
    predicate), or on the length 0/1 of a container the model computed (an
    input's length is the caller's choice, not an accident)."""
    if proxy.__dict__.get("_specfx_degenerate", False):
        return True
    if kind in ("iter", "len", "keys") and type(proxy) is ValueProxy and proxy.node.op != "placeholder":
        return len(value) <= 1 if kind == "keys" else value <= 1
    if kind == "shape":
        return any(size in (0, 1) for size in value)
    if kind in ("size", "numel"):
        return value in (0, 1)
    return False


def _is_parameter_node(proxy: ValueProxy) -> bool:
    return type(proxy) is ValueProxy and proxy.node.op == "get_attr" and isinstance(
        value_of(proxy), torch.nn.Parameter
    )


def _config_fix(proxy: ValueProxy, value: Any) -> Optional[str]:
    if type(proxy) is ValueProxy and proxy.node.op == "placeholder" and not isinstance(value, torch.Tensor):
        return f"bake the input in with concrete_args={{{proxy.node.target!r}: {value!r}}}"
    return None
