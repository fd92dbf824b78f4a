"""``SpecTracer``: a ``torch.fx.Tracer`` whose proxies carry example values.

Each node's concrete value is computed alongside the graph by running the op
on the concrete values of its inputs. Value-demanding operations arrive at the
hooks of :class:`~specfx._capture.demands.ValueDemands`, mixed in here (FX's ``to_bool``
and ``iter``, and ``resolve_*``/``read_*`` for the rest); each describes its answer as a :class:`~specfx._capture.decisions.Decision` and
hands it to the one :class:`~specfx._capture.decisions.Decider`, which checks the policy
in force (the base policy, the ``scopes`` of the submodules being traced and
``@specialize`` annotations), records the :class:`Specialization` and emits the
guard node, or raises :class:`SpecializationError`.

Without example inputs nothing carries a value and the tracer records the
same graph ``torch.fx.symbolic_trace`` does.
"""

from __future__ import annotations

import builtins
import collections
import contextvars
import contextlib
import dataclasses
import inspect
import math
import operator
import sys
import threading
import types
from typing import Any, Callable, Dict, Iterable, NoReturn, Optional, Tuple, cast

import torch
import torch.fx
from torch.fx.graph_module import _CodeOnlyModule
from torch.fx.node import Node
from torch.fx.proxy import Proxy, TracerBase

from . import ambient as _ambient
from . import autograd as _autograd

from .._frames import caught as _caught

from .._policy import messages as _messages

from . import patches as _patches
from .patches import ModelType
from .._frames.bytecode import TypeCheck, type_checks
from .decisions import Decider, Decision
from .._graph.model_watch import check_model
from .._graph.module_state import SELF, assign_attribute
from .._graph.retrace import anchor_tracer, grad_enabled
from .._graph.specialization import Specialization
from .deferred import DeferredValues
from .demands import ValueDemands
from .evaluation import (StateView, Unevaluable, concrete_values, provenance, run_op, runs_only_torch_code,
                         tensor_meta, tensor_metadata)
from .constants import GraphConstants, needs_attribute
from .factories import check_generator, record_factories
from .foreign import PARAMETER_NEW, ForeignModules, parameter_made_in_forward
from .held import reading_held_tensors
from .python_draws import install as install_python_draws
from .type_answers import TypeAnswers
from .control_flow import install as install_cond
from .._policy.describe import function_path
from .._policy.policy import Layer, Policy, Specialize
from .python_state import PythonState, install_cache_bypass, install_warnings, namespaces, store_location
from .roots import (default_to_concrete_values, definition_line, optional_parameters,
                     put_varargs_before_keyword_only, with_root_hooks)
from .._policy.scope import annotations_active, fresh_layers, push_layer, reset_layers
from .._frames.source import SourceLocation, is_user_file, user_location
from .state import NO_STATE
from .._graph.structure import StructuredCodeGen, structured_root
from .._graph.structure import create_args as create_structured_args
from .._graph.message_text import format_message, has_placeholders, split_placeholders
from .._graph.objects import rebuild_object
from .outputs import is_transformers_cache, template_of, traced_tensors_in, unrepresentable_output_error
from .scripted import ScriptedFunctions
from .transformers import capture_leaf_outputs, install_transformers_support
from .checks import install_checks
from .wrapped_root import call_through_wrapper, is_wrapped
from .values import (
    MISSING,
    ValueAttribute,
    PENDING,
    ProxyState,
    ValueProxy,
    value_of,
)
from ..errors import SpecializationError
from ..guards import GuardKind
from .._checks.kinds import fingerprint

__all__ = ["TRACE_LOCK", "SpecTracer"]

# torch.fx patches torch.nn.Module globally while it traces, so traces are
# serialized; code in other threads keeps running eagerly (see `_is_tracing`).
TRACE_LOCK = threading.RLock()
_ACTIVE_TRACER: contextvars.ContextVar[Optional["SpecTracer"]] = contextvars.ContextVar(
    "specfx_active_tracer", default=None
)


def autocast_enabled(device_type: str, anchor: Any = None) -> bool:
    """``torch.is_autocast_enabled(device_type)`` as a specfx graph reads it for its autocast
    guard. ``anchor`` is the graph's first input and is not read: re-traced by any tracer it is
    that tracer's proxy, and the call records itself (as :func:`specfx.grad_enabled` does), so
    the guard is handed a proxy and stays in the graph instead of running once on the
    re-trace's own answer. (Graphs saved without an anchor record it on a specfx re-trace.)"""
    tracer = anchor_tracer(anchor)
    if tracer is not None:
        return cast(bool, tracer.create_proxy("call_function", autocast_enabled, (device_type, anchor), {}))
    tracer = _ACTIVE_TRACER.get()
    if anchor is None and tracer is not None and tracer._is_tracing():
        return cast(bool, tracer.create_proxy("call_function", autocast_enabled, (device_type,), {}))
    return torch.is_autocast_enabled(device_type)


autocast_enabled.__module__ = "specfx"  # generated code and pickles name it by the public package's path


_VIEW_METHODS = frozenset({"keys", "values", "items"})
# Constants that torch.fx's Tracer.create_arg returns unchanged after several type checks.
_PLAIN_ARGUMENT_TYPES = frozenset(
    {int, float, bool, str, complex, type(None), type(...), torch.dtype, torch.device, torch.memory_format,
     torch.layout}
)
_CALL_KINDS = frozenset({"call_function", "call_method", "call_module"})
_set_grad_mode = torch._C._set_grad_enabled  # (taken before specfx patches it while tracing)


class _ModuleStack(collections.OrderedDict[str, Any]):
    """The tracer's stack of module calls. torch.fx copies it (``copy.copy``) into
    every node's ``meta['nn_module_stack']``; nodes made one after another under the same
    stack get one copy between them, as nodes copied by torch.fx's ``Graph.node_copy``
    share theirs: about 400 bytes and 4 µs per node less (OrderedDict's generic copy goes
    through pickling's reduce protocol)."""

    _last: Optional[collections.OrderedDict[str, Any]] = None

    def __copy__(self) -> collections.OrderedDict[str, Any]:
        last = self._last
        if last is None or last != self:  # (order-sensitive: both are OrderedDicts)
            last = self._last = collections.OrderedDict(self)
        return last


_NUMBERS = (int, float, complex, bool)


def _operand_value(form: Tuple[Any, ...], names: Any, space: Optional[Dict[str, Any]]) -> Any:
    """The value of an identity test's other operand (:attr:`TypeCheck.other`), MISSING if unknown."""
    if not form:
        return MISSING
    where, name, *attributes = form
    if where == "const":
        value = name
    elif where == "local":
        value = names.get(name, MISSING)
    else:
        value = space.get(name, MISSING) if space is not None else MISSING
        if value is MISSING and space is not None:
            value = getattr(builtins, name, MISSING)
    for attribute in attributes:
        if value is MISSING or isinstance(value, Proxy):
            return MISSING
        value = getattr(value, attribute, MISSING)
    return value


class SpecTracer(ValueDemands, torch.fx.Tracer):
    """A value-carrying ``torch.fx.Tracer``; use :func:`specfx.trace` to drive it.

    Constructed with no arguments it behaves like ``torch.fx.Tracer`` (this is
    what unpickling a GraphModule does). ``policy``, ``leaf_modules``,
    ``guards`` and ``trace_through`` are keyword-only extras; example values are
    given to :meth:`set_examples` before :meth:`trace`.

    To change how tracing works, subclass it, override torch.fx's hooks (their
    docstrings start "Called ..."; e.g. ``is_leaf_module``) and pass the class
    as ``specfx.trace(..., tracer_class=MyTracer)``: ``trace()`` constructs it
    with the arguments above, so the examples, the policy, state keeping and the
    records stay ``trace()``'s.

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
        trace_through: Optional[Iterable[Any]] = None,
    ) -> None:
        super().__init__(autowrap_modules, autowrap_functions, param_shapes_constant)  # type: ignore[arg-type]  # torch annotates a 1-tuple
        # (torch.fx's list, read again without the wrappers another thread's trace may have installed)
        self._autowrap_function_ids = _patches.autowrap_ids(autowrap_modules, autowrap_functions)
        self.module_stack = _ModuleStack()
        policy = policy if policy is not None else Policy()
        if param_shapes_constant:
            policy = policy | Policy(param_shapes_constant=True)
        self.policy = policy
        self.guards = guards
        self._leaf_types = tuple(m for m in (leaf_modules or ()) if isinstance(m, type))
        self._leaf_names = frozenset(m for m in (leaf_modules or ()) if isinstance(m, str))
        self._through_types = tuple(m for m in (trace_through or ()) if isinstance(m, type))
        self._through_names = frozenset(m for m in (trace_through or ()) if isinstance(m, str))
        self.examples: Optional[Dict[str, Any]] = None
        self.decisions = Decider(self, guards)
        self.state: StateView = NO_STATE  # the trace's private copies of the model's tensors
        self._module_path: list[str] = []
        self._leaf_answer: Tuple[Any, str, bool] = (None, "", False)  # (module, name, is_leaf_module's answer)
        self._has_scopes = bool(self.policy.scopes)
        self._entered: Optional[Tuple[str, torch.nn.Module]] = None  # the module call_module saw last
        self._evaluating = 0
        # values computed when first read (set by specfx.trace; see _deferred.py)
        self.defer_values = False
        self._deferred = DeferredValues()
        self.pending_values = self._deferred.pending  # (read by value_of for every value)
        self._module_names: Optional[Dict[int, list[str]]] = None  # id of a submodule -> all its names
        self._state_names: Optional[Dict[int, str]] = None  # id of a parameter/buffer -> qualified name
        self._base_layer = Layer(self.policy, f"trace(policy={self.policy!r})")
        # Refusals and failed ops the model code may catch: with examples, the trace fails anyway.
        self._refusals: list[BaseException] = []
        self._failed_ops: list[Tuple[BaseException, str, Optional[SourceLocation]]] = []
        self._concrete_names: frozenset = frozenset()
        self._codegen: Optional[StructuredCodeGen] = None  # inputs/outputs as pytrees (_structure.py)
        self._scripted = ScriptedFunctions(self._is_tracing)
        self._constants = GraphConstants(self)  # values the generated code reads from attributes
        self._foreign = ForeignModules(self)  # modules the root does not own, named when called
        self._output: Any = None
        self._root_fn: Any = None  # the traced forward: how a fix reaches it (use_cache, ...)
        self._trace_frame: Optional[types.FrameType] = None
        # (the frame of the innermost module call being traced, the except clauses above it (read
        # at each op), the memo of the walks from its ops up to it)
        self._boundary: Tuple[Optional[types.FrameType], Optional[_caught.Clauses], list] = (
            None, None, _caught.new_memo())
        # while a leaf call is recorded: the frame that called call_module (the frames below it
        # are torch.fx's and specfx's, not walked for try blocks)
        self._leaf_caller: Optional[types.FrameType] = None
        self._own_call_module = type(self).call_module is SpecTracer.call_module
        # (name, module) of the modules that may hold tensors as plain attributes, when
        # specfx.trace's StateKeeper has found them already (else _held scans every module)
        self.attribute_holders: Optional[list[Tuple[str, torch.nn.Module]]] = None
        # frames that compare type(x), checked again when they return (_check_returned_frames)
        self._watched_frames: Dict[int, types.FrameType] = {}
        self._types: Optional[TypeAnswers] = None  # type() in model code, answered (while tracing with examples)
        # Python state outside the model, remembered while a trace with examples runs (python_state.py)
        self._python_state: Optional[PythonState] = None
        # what forward does to the model's own state (its StateKeeper, given by specfx.trace)
        self.model_keeper: Optional[Any] = None
        # traced values formatted into a message the graph records (see _message_flow.py)
        self.message_values: list[Tuple[ValueProxy, str]] = []

    @property
    def specializations(self) -> list[Specialization]:
        """The decisions recorded so far, in trace order."""
        return self.decisions.specializations

    def set_examples(self, examples: Optional[Dict[str, Any]]) -> None:
        """Give the example value of each placeholder by name (``*args``/``**kwargs``
        under ``"*name"``/``"**name"``); ``None`` traces symbolically."""
        self.examples = examples

    # -- driving the trace -------------------------------------------------------------

    def trace(self, root: Any, concrete_args: Optional[Dict[str, Any]] = None) -> torch.fx.Graph:
        """Trace ``root`` as ``torch.fx.Tracer.trace`` does, with this tracer's values and policy."""
        with TRACE_LOCK:
            active = _ACTIVE_TRACER.set(self)
            annotations = annotations_active().set(self.policy.annotations)
            token = fresh_layers()
            self._concrete_names = frozenset(concrete_args or ())
            self._scripted = ScriptedFunctions(self._is_tracing)
            self._trace_frame = sys._getframe()  # try blocks above it are the caller's, not the model's
            spaces = namespaces(root) if self.examples is not None else []
            python_state = self._python_state = PythonState(root, spaces) if self.examples is not None else None
            try:
                with _patches.tracing():
                    _patches.confine_fx_tracing_flag()
                    if self.examples is not None:
                        _ambient.install(self)
                        self._foreign.watch()
                        install_cache_bypass(self, spaces)
                        install_warnings(self)
                        self._types = TypeAnswers(self)
                        self._types.install(spaces)
                        install_cond(self)
                    # (after ambient's refusals; without examples too: re-tracing generated code,
                    # as unpickling does, must record the graph's draws again)
                    install_python_draws(self, self.decisions.draws)
                    if self.examples is not None or _is_generated(root):
                        _autograd.install(self)  # (re-tracing generated code records the calls again)
                    record_factories(self)
                    # @torch.jit.script helpers and transformers' vmapped masks, for the tracing code
                    self._scripted.cover(type(root).forward if isinstance(root, torch.nn.Module) else root)
                    install_transformers_support(self._is_tracing, self._is_evaluating)
                    install_checks(self)
                    with reading_held_tensors(self, root):
                        graph = super().trace(root, concrete_args)
                    self._compute_pending()
                    if self._deferred.failure is not None:  # raised, and caught by model code
                        raise self._deferred.failure
                    self._check_returned_frames(None)
                    self._fail_if_caught()
                    _caught.restore(graph, root)
                if python_state is not None:  # (compared once every patch of the trace is undone)
                    self._refuse_python_state_changes(python_state, spaces, root)
                return graph
            finally:
                if python_state is not None:
                    python_state.restore()
                    self._python_state = None
                self._trace_frame = None
                # (the walks' memo holds frames of the traced code, and their locals: let them go)
                self._boundary, self._leaf_caller = (None, None, _caught.new_memo()), None
                self._watched_frames.clear()
                self._types = None
                reset_layers(token)
                annotations_active().reset(annotations)
                _ACTIVE_TRACER.reset(active)

    def _refuse_python_state_changes(self, python_state: PythonState, spaces: Any, root: Any) -> None:
        changes = python_state.refused_changes()
        if changes:
            python_state.restore()
            location = store_location(changes, spaces, root) or definition_line(
                root.forward if isinstance(root, torch.nn.Module) else root)
            self.refuse(SpecializationError(_messages.python_state_changes(changes, location),
                                            operation="a change to Python state",
                                            location=str(location) if location else None))

    def constant_proxy(self, value: Any, prefix: str) -> Proxy:
        """A ``get_attr`` proxy of an object the graph must hold (a class it calls): kept on the
        root under one name per trace, and found again by that name when specfx re-traces its
        own generated code. (The trace's changes to the model are undone when it ends; the
        graph module keeps the attribute.)"""
        root = self.root
        name = self.tensor_attrs.get(value)  # (torch.fx's table of the constants the root holds)
        if name is None:
            name = next((key for key, held in vars(root).items() if key.startswith(prefix) and held is value), None)
        if name is None:
            # (a lambda's name, `<lambda>`, spelled as an identifier)
            label = "".join(c if c.isalnum() or c == "_" else "" for c in getattr(value, "__name__", type(value).__name__))
            name = self.get_fresh_qualname(prefix + label + "_")
            setattr(root, name, value)
        self.tensor_attrs[value] = name
        return self.create_proxy("get_attr", name, (), {})

    def refuse(self, error: BaseException) -> NoReturn:
        """Raise ``error`` (a refusal); with examples the trace fails even if model code catches it."""
        if self.examples is not None:
            self._refusals.append(error)
        raise error

    def _fail_if_caught(self) -> None:
        """The model caught a refusal or an op's exception and went on: fail the trace (with
        the refusal, or with the line of the op whose failure the code turned into a fallback)."""
        if self._refusals:
            raise self._refusals[0]
        if self._failed_ops:
            error, operation, location = self._failed_ops[0]
            raise _messages.caught_error(operation, error, location)

    def _is_tracing(self) -> bool:
        # False in other threads (FX's patches are global) and while evaluating values.
        return self._evaluating == 0 and _ACTIVE_TRACER.get() is self

    def _is_evaluating(self) -> bool:
        # True while this trace runs code for a value (a leaf module, an op), in its own context
        return self._evaluating > 0 and _ACTIVE_TRACER.get() is self

    def records_factories(self) -> bool:
        """Whether a torch factory called now is model code being traced (not code that
        computes a value, and not another thread)."""
        return self._is_tracing()

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        """Called for each submodule call: leaf modules become ``call_module`` nodes
        (``leaf_modules`` types or qualified names, plus torch.fx's defaults, except
        the ``trace_through`` types or names, whose forward is traced into)."""
        answer = self._leaf_answer
        if answer[0] is m and answer[1] == module_qualified_name:
            return answer[2]
        if self._leaf_types and isinstance(m, self._leaf_types):
            return True
        if module_qualified_name in self._leaf_names:
            return True
        if module_qualified_name in self._through_names:
            return False
        if self._through_types and isinstance(m, self._through_types):
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(
        self, m: torch.nn.Module, forward: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Any:
        """Called for each submodule call: pushes the ``scopes`` policy that
        matches the submodule's qualified name while it is traced."""
        if self._evaluating or _ACTIVE_TRACER.get() is not self:  # (not tracing: _is_tracing, inlined)
            return forward(*args, **kwargs)
        qualname = self.path_of_module(m)
        leaf = self.is_leaf_module(m, qualname)
        self._leaf_answer = (m, qualname, leaf)  # torch.fx's call_module asks again, right away
        if not leaf:  # its code may call @torch.jit.script functions
            self._scripted.cover(getattr(type(m), "forward", None))  # (a ScriptModule class raises)
            if self.examples is not None:
                self._check_types_at_entry(forward, args, kwargs)
        match = self._scope_of(m, qualname) if self._has_scopes else None
        token = (
            push_layer(Layer(match[1], f"scopes[{match[0]!r}] (module {qualname})")) if match else None
        )
        self._module_path.append(qualname)
        self._entered = (qualname, m)  # a leaf's value is computed with m itself, not found by name
        boundary, leaf_caller = self._boundary, self._leaf_caller
        if leaf and self.examples is not None:
            # the frame that called the module: torch.fx's module_call_wrapper calls this method
            # (its frame is skipped unmade), unless a subclass's override called it
            self._leaf_caller = sys._getframe(2 if self._own_call_module else 1)
        elif self.examples is not None:
            # The frames from here up stay as they are while m's forward runs: walked once for
            # its ops' try blocks (and type() checks), down to the enclosing module's boundary.
            here = sys._getframe()
            self._boundary = (here, _caught.joined(
                _caught.protection(boundary[0] or self._trace_frame, self._frame_with_type_checks, None, boundary[2]),
                boundary[1]), _caught.new_memo())
        try:
            result = super().call_module(m, forward, args, kwargs)
            if leaf and self.examples is not None:
                capture_leaf_outputs(m, args, result)  # (transformers' output_hidden_states hooks)
            if self._watched_frames:
                self._check_returned_frames(getattr(getattr(forward, "__func__", forward), "__code__", None))
            if (type(result) is ValueProxy and result.node.op == "call_module"
                    and result.__dict__["_specfx"] is not PENDING and value_of(result) is None):
                return self._none(result)  # a leaf that returned None (no mask, no cache), as in eager
            return result
        finally:
            self._boundary, self._leaf_caller = boundary, leaf_caller
            self._module_path.pop()
            if token is not None:
                reset_layers(token)

    def _scope_of(self, m: torch.nn.Module, qualname: str) -> Optional[Tuple[str, Policy]]:
        """The ``scopes`` entry for ``m``: a module registered under several names matches
        through any of them (the most specific pattern wins)."""
        if not self.policy.scopes:
            return None
        if self._module_names is None:
            self._module_names = {}
            for name, module in self.root.named_modules(remove_duplicate=False):
                self._module_names.setdefault(id(module), []).append(name)
        return self.policy.scope_match(*self._module_names.get(id(m), [qualname]))

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: Dict[str, Any]) -> Any:
        """Called for module attribute reads: parameters become ``get_attr``
        proxies carrying the parameter. With example inputs buffers do too, so
        that ``self.position_ids[:, :seq_len]`` and decisions on buffers stay in
        the graph (without examples buffers stay tensors, as in torch.fx)."""
        if self._evaluating or not isinstance(attr_val, torch.Tensor) or not self._is_tracing():
            return attr_val  # (reads inside leaf modules being run come first: they are the many)
        is_parameter = isinstance(attr_val, torch.nn.Parameter)
        name = self.state_name(attr_val)
        # Re-tracing generated code (unpickling, specfx.trace(gm)) proxies buffers too: the code
        # slices them by symbolic sizes (`position_ids[:, :size_1]`), which a tensor cannot take.
        if name is None or not (is_parameter or self.examples is not None or self.proxy_buffer_attributes
                                or self._codegen is not None or _is_generated(self.root)):
            return attr_val
        proxy = parameter_proxy_cache.get(name)
        if proxy is None:
            proxy = parameter_proxy_cache[name] = self.create_proxy("get_attr", name, (), {})
        return proxy

    def path_of_module(self, mod: torch.nn.Module) -> str:
        """Called for each module call: its qualified name in the root. With examples a module
        the root does not own (built in forward, module-level) gets a generated one (foreign.py)."""
        try:
            return super().path_of_module(mod)
        except NameError:
            if self.examples is None or not self._is_tracing():
                raise  # (without examples, torch.fx's answer)
            name = self._foreign.name(mod)
            if self.submodule_paths is not None:
                self.submodule_paths[mod] = name
            return name

    def forget_state_names(self) -> None:
        """The root gained a module: name its parameters and buffers afresh."""
        self._state_names = None
        self._module_names = None

    def state_name(self, tensor: torch.Tensor) -> Optional[str]:
        """The qualified name of ``tensor`` among the root's parameters and buffers, if it is one."""
        if self._state_names is None:
            self._state_names = {id(p): n for n, p in self.root.named_parameters()}
            self._state_names.update({id(b): n for n, b in self.root.named_buffers()})
        return self._state_names.get(id(tensor))

    def proxy(self, node: Node) -> ValueProxy:
        """Called to wrap each new node: specfx proxies carry values."""
        return ValueProxy(node, self)

    def create_arg(self, a: Any) -> Any:
        """Called to turn arguments into graph arguments; a proxy is its node."""
        if isinstance(a, Proxy):
            return a.node
        if type(a) in _PLAIN_ARGUMENT_TYPES:  # torch.fx's Tracer checks these slowly, for nothing
            return a
        if type(a) is torch.Generator:
            check_generator(self, a)
        if a is SELF:  # the graph module itself, written `self` (a rebinding of its attribute)
            return a
        if needs_attribute(a):  # numpy values: no repr() the generated code could run
            return self._constants.node(a)
        if type(a) in (tuple, list, dict):
            # a node's args tuple and kwargs dict: torch.fx's Tracer.create_arg would first check
            # them against Parameter, Tensor, Module, namedtuple, constant and opaque types
            return TracerBase.create_arg(self, a)
        if isinstance(a, dict) and type(a) is not dict and dataclasses.is_dataclass(a):
            # transformers' ModelOutput: a dict subclass, which torch.fx would return as a plain dict
            return self.create_node("call_function", type(a), (), {k: self._field_arg(v) for k, v in a.items()})
        if dataclasses.is_dataclass(a) and not isinstance(a, type):
            return self.create_node("call_function", type(a), (),
                                    {f.name: self._field_arg(getattr(a, f.name)) for f in dataclasses.fields(a)})
        try:
            return super().create_arg(a)
        except NotImplementedError as error:  # e.g. a transformers cache returned by forward
            rebuilt = self._rebuilt_object(a)
            if rebuilt is not None:
                return rebuilt
            better = unrepresentable_output_error(self._output, a, error, self._root_fn, self.root)
            if better is None:
                raise
            raise better from None

    def _field_arg(self, value: Any) -> Any:
        """A field of an object the graph builds: a ``torch.Size`` of known sizes stays a
        ``torch.Size`` (a node calling it; torch.fx writes a Size constant as a plain tuple)."""
        if type(value) is torch.Size:
            return self.create_node("call_function", torch.Size, (tuple(value),), {})
        return self.create_arg(value)

    def _rebuilt_object(self, obj: Any) -> Optional[Node]:
        """A node that rebuilds ``obj`` (a transformers cache holding traced tensors) at run
        time from a template kept on the graph (_graph/objects.py); None for other objects."""
        if not is_transformers_cache(obj):
            return None
        traced = traced_tensors_in(obj, lambda value: isinstance(value, Proxy))
        if not traced:
            return None
        name = self.get_fresh_qualname("_specfx_object_")
        setattr(self.root, name, template_of(obj, traced))  # (as torch.fx keeps its tensor constants)
        template = self.create_node("get_attr", name, (), {})
        return self.create_node("call_function", rebuild_object,
                                (template, tuple(path for path, _ in traced), *(v.node for _, v in traced)), {})

    def create_args_for_root(self, root_fn: Callable[..., Any], is_module: bool, concrete_args: Any = None) -> Any:
        """Called once to make the placeholders; an example that is ``None``
        is passed to the code as ``None`` (so ``x is None`` answers truly) and guarded.
        With examples (or re-tracing specfx's generated code) the placeholders are the
        leaves of the inputs and the graph checks their structure at entry (_structure.py)."""
        where = definition_line(root_fn)
        self._root_fn = root_fn
        code = getattr(inspect.unwrap(root_fn), "__code__", None)
        if is_module and code is not None and code.co_argcount + code.co_kwonlyargcount == 0:
            # `def forward(*args, **kwargs)` with `self = args[0]`: torch.fx refuses it before
            # reading any example, so does specfx (examples or not)
            raise RuntimeError(_messages.SELF_IN_VARARGS)
        if not concrete_args and (self.examples is not None or structured_root(self.root)):
            fn, leaves, self._codegen = create_structured_args(
                self, root_fn, is_module, self.examples,
                baked=lambda proxy, value, label, expected: self.decide(Decision(
                    proxy, GuardKind.VALUE, Specialize.NONE, value, (expected,), label, f"`{label}`",
                    location=where)),
                none_input=lambda proxy: self._none(proxy, where),
                call=with_root_hooks(root_fn, self.root, self.refuse) if is_module else root_fn,
            )
            return fn, leaves
        wrapped = is_wrapped(root_fn)  # torch.fx would rewrite the wrapper's code: give it the real function
        fn, args = super().create_args_for_root(inspect.unwrap(root_fn) if wrapped else root_fn, is_module,
                                                concrete_args)
        if wrapped:
            fn = call_through_wrapper(root_fn, is_module)
        put_varargs_before_keyword_only(self.graph, root_fn)
        default_to_concrete_values(self.graph, concrete_args)
        if self.examples is None:
            return fn, args
        if is_module:
            fn = with_root_hooks(fn, self.root, self.refuse)
        root_call = fn

        def keeping_output(*args: Any) -> Any:  # kept to name an output that no graph can return
            self._check_types_at_entry(root_fn, args, {})
            self._output = root_call(*args)
            return self._output

        # torch.fx reads the root's annotations for the generated signature: the root's own, not 'Any'
        keeping_output.__annotations__ = dict(getattr(root_call, "__annotations__", {}))
        fn = keeping_output
        where = definition_line(root_fn)
        optional = optional_parameters(root_fn)
        new_args = []
        for arg in args:
            if type(arg) is ValueProxy and arg.node.op == "placeholder":
                if value_of(arg) is None:
                    arg = self._none(arg, where)
                elif arg.node.target in optional:  # `if bias is not None` must not pass a None silently
                    self._not_none(arg, where)
            new_args.append(arg)
        return fn, new_args

    def note_input_kinds(self, kinds: Optional[str]) -> None:
        """Called when specfx's generated entry check runs on this trace's own inputs
        (re-tracing a specfx graph without examples): the new graph checks the same kinds."""
        if self.examples is None and self._codegen is not None:
            self._codegen.kinds = kinds

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
        (so a failing op leaves no node behind) and attaches it to the proxy; or, for
        an op of torch's own while tracing with examples, attaches a pending value
        computed when first read (_deferred.py)."""
        if self._evaluating:
            raise Unevaluable()
        if self.message_values and kind == "call_function":
            args = self._with_run_time_messages(args)
        if self.examples is None and kind != "get_attr" and kind != "placeholder":
            # without examples nothing runs, as in torch.fx (_evaluate's answer, without the call)
            proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
            if type(proxy) is ValueProxy:
                self._attach(proxy, kind, target, args, kwargs, MISSING)
            return proxy
        if self.defer_values and kind in _CALL_KINDS and proxy_factory_fn is None:
            leaf = None
            if kind == "call_module":
                entered = self._entered
                leaf = entered[1] if entered is not None and entered[0] == target else self._submodule(target)
            if self._deferred.deferrable(kind, target, args, leaf):
                proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr)
                self._deferred.add(proxy, kind, target, args, kwargs, leaf)  # type: ignore[arg-type]  # (self.proxy's)
                self._protect(proxy, sys._getframe(1))  # (create_proxy's caller)
                return proxy
        if self._deferred.pending:
            self._compute_pending()
        value = self._evaluate(kind, target, args, kwargs)
        proxy = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        if type(proxy) is not ValueProxy:
            return proxy
        self._attach(proxy, kind, target, args, kwargs, value)
        if value is not MISSING and kind in _CALL_KINDS:
            self._protect(proxy, sys._getframe(1))  # (create_proxy's caller)
        return proxy

    def _with_run_time_messages(self, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """``args`` with each message that formats traced values (placeholders, see
        _message_flow.py) replaced by a node that formats their run-time values."""
        if not any(has_placeholders(arg) for arg in args):
            return args
        replaced = []
        for arg in args:
            if has_placeholders(arg):
                literals, indices = split_placeholders(arg)
                parts = [self.message_values[i] for i in indices]
                specs = tuple(spec for _, spec in parts)
                arg = self.create_proxy("call_function", format_message,
                                        (literals, specs, *(proxy for proxy, _ in parts)), {})
            replaced.append(arg)
        return tuple(replaced)

    def _attach(self, proxy: ValueProxy, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                value: Any) -> None:
        from_shapes, degenerate = provenance(kind, target, args, kwargs, value)
        mapping = (args[0] if kind == "call_method" and target in _VIEW_METHODS
                   and isinstance(value_of(args[0]), dict) else None)
        proxy.__dict__["_specfx"] = ProxyState(value, from_shapes, degenerate, mapping,
                                               _dimension(kind, target, args, kwargs) if from_shapes else None)
        if value is MISSING:
            return
        meta = tensor_metadata(value) if type(value) is torch.Tensor else tensor_meta(value)
        if meta is not None:
            proxy.node.meta["tensor_meta"] = meta
        proxy.node.meta["type"] = type(value)

    def _protect(self, proxy: Proxy, caller: types.FrameType) -> None:
        frame, outer, memo = self._boundary  # the frames above it were walked when its module was entered
        # Walked from the op's caller up: from the frame that called call_module for a leaf, else
        # from ``caller``, create_proxy's caller, taken at its entry (on Python >= 3.11 each frame
        # walked for the first time gets a frame object, and those of create_proxy and _protect
        # are new for every op). A start below the user's frame only adds specfx frames, which
        # the walk passes over.
        start = self._leaf_caller or caller
        self._leaf_caller = None
        clauses = _caught.joined(
            _caught.protection(frame or self._trace_frame, self._frame_with_type_checks, start, memo), outer)
        if clauses is not None:  # the model code would catch what this op may raise
            proxy.node.meta[_caught.CAUGHT] = _caught.Caught(_caught.read_clauses(clauses), self.describe(proxy),
                                                           _where(user_location()), _caught.target_name(proxy.node))

    def computed_state(self, proxy: ValueProxy) -> ProxyState:
        """``proxy``'s state, its pending value computed (with every other pending one)."""
        self._compute_pending()
        state = proxy.__dict__["_specfx"]
        if state is PENDING:  # an op before it raised, and model code caught that
            raise self._deferred.failure or RuntimeError(f"specfx: no value for node {proxy.node.name}")
        return cast(ProxyState, state)

    def _compute_pending(self) -> None:
        """Compute the pending values, in the order their ops were recorded, each under the
        grad mode it was recorded under (the mode now is put back after)."""
        pending = self._deferred.take()
        if not pending:
            return
        # Popped in recorded order: an op's arguments are let go once its value is computed, so
        # a value nothing else holds is freed after its last use, as in eager (kept to the end of
        # the batch, every activation of a forward was alive at once: ResNet-50 +35 % peak memory).
        pending.reverse()
        mode_now = mode = torch._C.is_grad_enabled()
        root, state = self.root, self.state
        translate = state.translate
        self._evaluating += 1  # one switch for the batch: leaves that ask "am I traced?" run as in eager
        fx_flag = _patches.fx_tracing_off()
        try:
            while pending:
                proxy, kind, target, args, kwargs, leaf, grad = pending.pop()
                if grad is not mode:
                    _set_grad_mode(grad)
                    mode = grad
                values = concrete_values(args, kwargs, translate if state.translating else None)
                if values is None:
                    value = MISSING
                else:
                    try:
                        value = run_op(root, kind, target, values[0], values[1], state, leaf)
                    except Unevaluable:
                        value = MISSING
                    except Exception as error:
                        self._deferred.fail(f"{_describe_call(kind, target)} raised {error!r}", error)
                    if value is None and kind == "call_module":  # the code got a proxy, not eager's None
                        self._deferred.fail(f"{_describe_call(kind, target)} returned None")
                self._attach(proxy, kind, target, args, kwargs, value)
        finally:
            _patches.restore_fx_tracing(fx_flag)
            self._evaluating -= 1
            if mode is not mode_now:
                _set_grad_mode(mode_now)

    def _evaluate(self, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if kind == "placeholder":
            if self.examples is None:
                return MISSING
            if target in self.examples:
                return self.examples[target]
            if any(target.startswith(name + "_") for name in self._concrete_names):
                return MISSING  # torch.fx's stand-in for a concrete arg, only there to be checked
            return args[0] if args else MISSING
        if target is assign_attribute or target is check_model:
            return None  # re-tracing a graph's rebinding of a module attribute or entry check: recorded, not run
        if kind == "output" or (self.examples is None and kind != "get_attr"):
            # Without examples nothing runs, as in torch.fx; parameters still carry
            # themselves so that param_shapes_constant can read their shapes.
            return MISSING
        values = concrete_values(args, kwargs, self.state.translate if self.state.translating else None)
        if values is None:
            return MISSING
        self._evaluating += 1
        fx_flag = _patches.fx_tracing_off()  # leaves that ask "am I traced?" run as in eager
        try:
            leaf = self._submodule(target) if kind == "call_module" else None
            if (self._python_state is not None or self.model_keeper is not None) and _runs_user_code(kind, target, leaf):
                # (the graph calls it again: the changes it makes repeat)
                with self._python_state.excusing() if self._python_state is not None else contextlib.nullcontext(), \
                        self.model_keeper.excusing() if self.model_keeper is not None else contextlib.nullcontext():
                    return run_op(self.root, kind, target, values[0], values[1], self.state, leaf)
            return run_op(self.root, kind, target, values[0], values[1], self.state, leaf)
        except Unevaluable:
            return MISSING
        except Exception as error:
            # if model code catches this and goes on, the graph would keep its fallback for
            # inputs on which the op does not raise: remembered, so the trace fails then
            self._failed_ops.append((error, _describe_call(kind, target), user_location()))
            raise
        finally:
            _patches.restore_fx_tracing(fx_flag)
            self._evaluating -= 1

    def _frame_with_type_checks(self, frame: types.FrameType) -> None:
        """A frame being traced whose code compares ``type(x)`` (seen while the tracer walks the
        frames at an op): checked now, and kept to check again when it has returned (its
        last ops may come before the comparison)."""
        self._watched_frames[id(frame)] = frame
        if self._types is not None:  # type() calls not run yet are answered from now on
            self._types.shadow(frame.f_globals)
        self._check_types_in(frame)

    def _check_types_in(self, frame: types.FrameType) -> None:
        """Refuse a compared ``type(x)`` call that certainly ran in ``frame`` (it dominates the
        instruction the frame is at) on a traced value: it answered specfx's proxy class."""
        lasti = frame.f_lasti
        for check in type_checks(frame.f_code):
            if lasti in check.dominated and not check.reassigned:
                if check.kind == "rng":
                    self._refuse_generator_control(check, frame.f_locals, frame.f_globals, frame.f_code)
                else:
                    self._refuse_type_of_proxy(check, frame.f_locals, frame.f_code, frame.f_globals)

    def _check_returned_frames(self, code: Optional[types.CodeType]) -> None:
        """A forward returned (``code``; None: the trace ended): check the watched frames again
        and let go of those of ``code``, which have returned."""
        if not self._watched_frames:
            return
        for key, frame in list(self._watched_frames.items()):
            self._check_types_in(frame)
            if code is None or frame.f_code is code:
                del self._watched_frames[key]

    def entering_root(self, function: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        """Called (by the structured inputs' code) right before the root's forward runs."""
        if self.examples is not None:
            self._check_types_at_entry(function, args, kwargs)

    def _check_types_at_entry(self, function: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        """Before ``function`` runs: a compared ``type(p)`` on a parameter ``p`` that every
        return path runs (and nothing reassigns) is refused now if ``p`` is a traced value;
        the code may trace no op after it, where :meth:`_type_of_traced_value` would see it."""
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        if code is None:
            code = getattr(inspect.unwrap(function), "__code__", None)
        if code is None:
            return
        found = type_checks(code)
        if not found:  # (nearly every forward: one cached lookup)
            return
        space = getattr(inspect.unwrap(getattr(function, "__func__", function)), "__globals__", {})
        if self._types is not None and any(c.kind == "type" for c in found):
            self._types.shadow(space)  # its type() calls are answered as eager's
        parameters = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        checks = [c for c in found if c.always and c.argument[0] in parameters
                  and not (c.kind == "type" and space.get("type") is ModelType)]
        if not checks:
            return
        try:
            bound = inspect.signature(function).bind_partial(*args, **kwargs).arguments
        except (TypeError, ValueError):
            return
        for check in checks:
            if check.stored:  # the value at entry may not be the one type() gets
                continue
            if check.kind == "rng":
                self._refuse_generator_control(check, bound, space, code)
            else:
                self._refuse_type_of_proxy(check, bound, code, space)

    def _refuse_generator_control(self, check: TypeCheck, names: Any, space: Dict[str, Any],
                                  code: types.CodeType) -> None:
        """``g.manual_seed(...)`` (or another method that seeds a generator, sets or reads its
        state) certainly ran on a ``torch.Generator`` ``g``: a graph records the draws from
        ``g``, not the seeding, so it would continue where the last call left off."""
        *chain, method = check.argument
        value = names.get(chain[0], space.get(chain[0]))
        for attribute in chain[1:]:
            if isinstance(value, Proxy):
                return
            value = getattr(value, attribute, None)
        if not isinstance(value, torch.Generator):
            return
        self.state.controlled.append(value)  # (put back when the trace ends, by the state keepers)
        if self._python_state is not None:
            self._python_state.controlled.append(value)
        location = SourceLocation(code.co_filename, check.line, code.co_name)
        what = f"{'.'.join(chain)}.{method}()"
        self.refuse(SpecializationError(
            _messages.refused_inside_code(what, *_messages.GENERATOR_CONTROL_REFUSAL, location),
            operation=what, location=str(location)))

    def _refuse_type_of_proxy(self, check: TypeCheck, names: Any, code: types.CodeType,
                              space: Optional[Dict[str, Any]] = None) -> None:
        value = names.get(check.argument[0])
        for attribute in check.argument[1:]:
            if isinstance(value, Proxy):
                return
            value = getattr(value, attribute, None)
        if not isinstance(value, Proxy):
            return
        if code is PARAMETER_NEW:  # a layer built in forward: its weights are made on every call
            self.refuse(parameter_made_in_forward())
        if check.kind == "type" and self._types is not None and self._types.answered(code, check.offset):
            return  # ModelType answered it as eager
        location = SourceLocation(code.co_filename, check.line, code.co_name)
        if check.kind == "type":
            self.refuse(_messages.type_of_traced_value(".".join(check.argument), value_of(value), location))
        example = value_of(value)
        other = _operand_value(check.other, names, space)
        if other is not MISSING and not isinstance(other, Proxy) and type(other) not in _NUMBERS:
            if type(example) in _NUMBERS:
                return  # a number is never that object, in eager as in the graph, for every number passed
        if type(example) in _NUMBERS:  # identity of a number is not its value
            self.refuse(_messages.identity_of_traced_number(".".join(check.argument), example, location))
        if example is not MISSING and not isinstance(example, torch.Tensor):
            # an object the trace carries as a proxy: never the object it is compared with
            self.refuse(_messages.identity_of_traced_object(".".join(check.argument), example, location))

    def _submodule(self, qualname: str) -> torch.nn.Module:
        # root.get_submodule walks the path through nn.Module.__getattr__, which torch.fx
        # patches while tracing: 6 patched reads for a leaf at depth 3, for every leaf call.
        entered = self._entered
        if entered is not None and entered[0] == qualname:
            return entered[1]
        return self.root.get_submodule(qualname)

    # -- ambient reads (torch.is_grad_enabled(), torch.is_autocast_enabled()) --

    def _ambient(self, read: Callable[..., bool], *args: Any) -> ValueProxy:
        """A node of ``read(*args)`` whose last argument is the graph's first input, its anchor:
        a re-trace by any tracer records the read again (see ``specfx.grad_enabled``)."""
        proxy = self._call(read, *args)
        anchor = next(iter(self.graph.find_nodes(op="placeholder")), None)
        if anchor is not None:
            proxy.node.args = (*args, anchor)
        return proxy

    def read_grad_mode(self, is_grad_enabled: Callable[[], bool]) -> bool:
        """Called for ``torch.is_grad_enabled()`` in traced code: a node, and a guarded answer."""
        proxy = self._ambient(grad_enabled)
        mode = bool(value_of(proxy))
        self.decide(Decision(proxy, GuardKind.GRAD_ENABLED, Specialize.NONE, mode, (mode,),
                             "torch.is_grad_enabled()", "`torch.is_grad_enabled()`"))
        return mode

    def read_ambient(self, getter: Callable[..., Any], name: str, args: Tuple[Any, ...]) -> Any:
        """Called for a process-wide setting read by traced code (``torch.get_default_dtype()``,
        ``torch.are_deterministic_algorithms_enabled()``...): a node, and a guarded answer."""
        proxy = self._call(getter, *args)
        value = value_of(proxy)
        label = f"torch.{name}({', '.join(map(repr, args))})"
        self.decide(Decision(proxy, GuardKind.VALUE, Specialize.NONE, value, (fingerprint(value),), label,
                             f"`{label}`"))
        return value

    def read_autocast(self, device_type: str, assumed: Optional[bool] = None) -> bool:
        """Called for ``torch.is_autocast_enabled(device_type)`` in traced code (``assumed`` None:
        the answer is the trace's, guarded) and when traced code turns autocast off
        (``assumed`` False: the graph is only valid where autocast is off)."""
        proxy = self._ambient(autocast_enabled, device_type)
        enabled = bool(value_of(proxy)) if assumed is None else assumed
        operation = "`torch.is_autocast_enabled()`" if assumed is None else "`torch.autocast(enabled=False)`"
        self.decide(Decision(proxy, GuardKind.VALUE, Specialize.NONE, enabled, (enabled,),
                             f"torch.is_autocast_enabled({device_type!r})", operation))
        return enabled


def _dimension(kind: str, target: Any, args: Tuple[Any, ...],
               kwargs: Dict[str, Any]) -> Optional[Tuple[Any, Optional[int]]]:
    """(tensor proxy, dim) when the node reads one dimension of a tensor: ``x.shape[d]`` or
    ``x.size(d)`` with a constant ``d``, or an element of ``x.size()`` (decisions on it are
    guarded as that size); (tensor proxy, None) for ``x.size()`` itself."""
    if kind == "call_function" and target is operator.getitem and len(args) == 2 and type(args[1]) is int:
        shape = args[0]
        if isinstance(shape, ValueAttribute):
            if shape.attr == "shape" and type(shape.root) is ValueProxy:
                return shape.root, args[1]
        elif type(shape) is ValueProxy:
            state = shape.__dict__.get("_specfx")
            if state is not None and state is not PENDING and state.dim is not None and state.dim[1] is None:
                return state.dim[0], args[1]
    elif kind == "call_method" and target == "size" and type(args[0]) is ValueProxy:
        dims = args[1:] or tuple(kwargs.values())
        if not dims:
            return args[0], None
        if len(dims) == 1 and type(dims[0]) is int:
            return args[0], dims[0]
    return None


def _where(location: Optional[SourceLocation]) -> str:
    return location.describe() if location is not None else "<unknown>"


def _describe_call(kind: str, target: Any) -> str:
    if kind == "call_method":
        return f".{target}()"
    if kind == "call_module":
        return f"self.{target}(...)"
    return f"{function_path(target)}()"


def _runs_user_code(kind: str, target: Any, leaf: Optional[torch.nn.Module]) -> bool:
    """Whether computing a node's value runs code of the user's that the graph runs again: a
    user-defined leaf module, a wrapped function, a custom autograd Function's forward."""
    if kind == "call_module":
        return leaf is not None and not runs_only_torch_code(leaf)
    if kind == "call_method":
        return target == "apply"
    code = getattr(target, "__code__", None)
    return kind == "call_function" and code is not None and is_user_file(code.co_filename)


def _is_generated(root: Any) -> bool:
    """Whether ``root`` runs torch.fx-generated code (a GraphModule, or the stand-in
    module that unpickling a GraphModule re-traces)."""
    return isinstance(root, (torch.fx.GraphModule, _CodeOnlyModule))


SpecTracer.__module__ = "specfx"  # a pickled GraphModule names its tracer class by the public path
