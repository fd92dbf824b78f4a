"""Tracing never writes to the user's objects.

Computing example values runs the model's ops for real: train-mode BatchNorm
updates its running statistics, in-place ops write to their inputs, Dropout
draws random numbers. Where it can, specfx makes those writes land on private
copies (copy-on-write), so the user's tensors are never written and other
threads using the same model are never reverted:

- example inputs are copied before they reach the model, whatever holds them
  (tuples, dicts, dataclasses, namespaces, custom objects);
- buffers (and any other tensor the trace reads from the model) are read as
  private copies; a leaf module (BatchNorm...) runs as a *shadow*: a shallow
  clone whose buffers are those copies (and, for user-defined leaves, whose
  parameters are copies too);
- a parameter is copied the moment an op is about to write to it (or to a view
  of it, ``.data`` included); later reads of it then see the copy;
- random ops draw from private generators standing for torch's default one and
  for those the model passes as ``generator=`` (``TraceState.draws``), created in
  their state, so neither is advanced and the values are eager's
  (``PrivateGenerators``).

What Python code does to the model itself cannot be redirected: attributes it
assigns, containers it appends to (``self.history.append(x)``), ``training``
flags, ``.grad``/``requires_grad`` of parameters, Python's and numpy's RNGs
(drawn from by user-defined leaves only). Those are snapshot under the trace
lock and put back, and a change the graph will not repeat is reported with a
warning.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import itertools
import operator
import random
import sys
import types
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import torch
import torch.fx

from .evaluation import INPLACE_FUNCTIONS, PrivateDraws, is_torch_module, module_may_draw, runs_only_torch_code

__all__ = ["ABSENT", "NO_STATE", "PrivateGenerators", "StateKeeper", "TableChange", "TraceState", "clone_example", "module_tree",
           "contents", "preserved_state", "restore_contents", "tensors_in"]


# -- example inputs --------------------------------------------------------------------------


def _clone_tensor(tensor: torch.Tensor) -> torch.Tensor:
    copy_ = tensor.detach().clone()
    if isinstance(tensor, torch.nn.Parameter):  # (sound) the code may ask isinstance(x, nn.Parameter)
        copy_ = torch.nn.Parameter(copy_, requires_grad=tensor.requires_grad)
    elif tensor.requires_grad:  # only float/complex tensors can require grad, so this is valid
        copy_.requires_grad_(True)
    if tensor.__dict__:  # (sound) Python attributes the code reads (`getattr(x, "scale", 1.0)`)
        copy_.__dict__.update(tensor.__dict__)
    return copy_


_OPAQUE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
           torch.nn.Module, torch.dtype, torch.device, torch.Generator, torch.fx.Proxy)


def clone_example(value: Any, _memo: Optional[Dict[int, Any]] = None) -> Any:
    """A copy of an example input whose tensors can be written to freely: tensors are
    cloned inside lists, tuples (named too), dicts, dataclasses and other objects
    with a ``__dict__``; the same object reached twice is cloned once."""
    memo: Dict[int, Any] = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, torch.Tensor):
        result: Any = _clone_tensor(value)
    elif type(value) in (list, tuple, dict) or isinstance(value, (list, tuple, dict)):
        result = _clone_container(value, memo)
    elif isinstance(value, _OPAQUE) or not _attributes(value) or not _holds_tensors(value, 3):
        return value
    else:
        result = copy.copy(value)
        memo[key] = result
        for name, item in _attributes(value).items():
            cloned = clone_example(item, memo)
            if cloned is not item:
                object.__setattr__(result, name, cloned)
        return result
    memo[key] = result
    return result


def _clone_container(value: Any, memo: Dict[int, Any]) -> Any:
    if isinstance(value, dict):
        items = {k: clone_example(v, memo) for k, v in value.items()}
        if type(value) is dict:
            return items
        result = copy.copy(value)
        result.update(items)
        return result
    items_list = [clone_example(v, memo) for v in value]
    if type(value) in (list, tuple):
        return type(value)(items_list)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*items_list)
    result = copy.copy(value)
    if isinstance(result, list):
        result[:] = items_list
        return result
    return type(value)(items_list)


def _holds_tensors(value: Any, depth: int) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth == 0 or isinstance(value, _OPAQUE):
        return False
    if isinstance(value, dict):
        return any(_holds_tensors(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensors(v, depth - 1) for v in value)
    return any(_holds_tensors(v, depth - 1) for v in _attributes(value).values())


def _attributes(value: Any) -> Dict[str, Any]:
    """An object's attributes: its ``__dict__`` and its ``__slots__`` (empty for builtins)."""
    found: Dict[str, Any] = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{cls.__name__.lstrip('_')}{name}"  # a private slot's mangled name
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found[name] = getattr(value, name)
    return found


# -- copy-on-write state ----------------------------------------------------------------------


def _storage_key(tensor: torch.Tensor) -> Optional[int]:
    if tensor.device.type == "meta" or tensor.layout is not torch.strided or tensor.is_quantized:
        return None
    try:
        return tensor.untyped_storage().data_ptr() or None
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        return None


class PrivateGenerators:
    """Private generators standing in for the user's (``generator(None)``: torch's
    default CPU generator), each created in the state its user's generator had at
    the first draw from it, so the draws are eager's and the user's generator is
    never advanced. ``fork()`` gives another set that starts from the same states
    (``check_inputs`` runs eager and the graph from one RNG state)."""

    def __init__(self, seeds: Optional[Dict[int, Tuple[Any, torch.Tensor]]] = None) -> None:
        self._seeds: Dict[int, Tuple[Any, torch.Tensor]] = {} if seeds is None else seeds  # id -> (user's, state)
        self._private: Dict[int, torch.Generator] = {}

    def generator(self, user: Optional[torch.Generator]) -> torch.Generator:
        source = torch.default_generator if user is None else user
        private = self._private.get(id(source))
        if private is None:
            seed = self._seeds.get(id(source))
            if seed is None:
                seed = self._seeds[id(source)] = (source, source.get_state())  # (keeps the id valid)
            private = self._private[id(source)] = torch.Generator()
            private.set_state(seed[1])
        return private

    def fork(self) -> "PrivateGenerators":
        return PrivateGenerators(self._seeds)


class TraceState:
    """The trace's private view of the model's tensors (see the module docstring).

    ``read`` gives the value an attribute read sees, ``writable`` the tensor an
    in-place op may write to, ``translate`` maps a value read before a copy was
    made onto the copy, ``module`` the module a leaf call runs."""

    def __init__(self, root: Any = None) -> None:
        # the model, whose tensors an op may reach without an attribute read the tracer
        # sees (a plain tensor attribute: torch.fx reads it as a constant)
        self._root: Optional[torch.nn.Module] = root if isinstance(root, torch.nn.Module) else None
        # generators the traced code seeded or set the state of (refused): their states are put back
        self.controlled: List[torch.Generator] = []
        self._private: Dict[int, torch.Tensor] = {}  # id(user's tensor) -> private copy
        self._storages: Dict[int, torch.Tensor] = {}  # storage of a copied tensor -> the copy's storage holder
        self._state: Dict[int, Optional[int]] = {}  # id of a tensor read from the model -> its storage key
        self._state_storages: Dict[int, torch.Tensor] = {}  # storage key -> a model tensor using it
        self.translating = False  # a tensor already handed out has been copied since
        self._keep: List[Any] = []  # keeps ids valid for the trace's lifetime
        # id(module) -> (the module a leaf call runs, `copies` when that was found)
        self._shadows: Dict[int, Tuple[torch.nn.Module, int]] = {}
        self._draws: Dict[int, bool] = {}  # id(module) -> whether calling it may draw
        self.generators = PrivateGenerators()
        self.copied = 0  # bytes copied, for measurements
        self.copies = 0  # private copies made so far

    def draws(self) -> Any:
        """A context in which random ops draw from the trace's private generators."""
        return PrivateDraws(self.generators.generator)

    def _copy(self, tensor: torch.Tensor, *, handed_out: bool = False) -> torch.Tensor:
        """A private tensor with ``tensor``'s storage layout (so views of it map onto views of the copy)."""
        if tensor.device.type == "meta":
            return tensor
        with torch.no_grad():
            if _storage_key(tensor) is None:
                private = _clone_tensor(tensor)
            elif (tensor.is_contiguous() and tensor.storage_offset() == 0
                  and tensor.numel() * tensor.element_size() == tensor.untyped_storage().nbytes()):
                private = tensor.detach().clone()  # same layout as the storage, and 3x faster
                self._storages[_storage_key(tensor) or 0] = private
                self.copied += private.untyped_storage().nbytes()
            else:
                storage = tensor.untyped_storage().clone()  # type: ignore[no-untyped-call]
                # (Tensor.new_empty: torch.empty is a graph factory while the forward is traced)
                private = tensor.detach().new_empty(0).set_(
                    storage, tensor.storage_offset(), tensor.size(), tensor.stride())
                self._storages[_storage_key(tensor) or 0] = private
                self.copied += storage.nbytes()
        if tensor.requires_grad and private.is_leaf:
            private.requires_grad_(True)
        self._private[id(tensor)] = private
        self.copies += 1
        self._keep.append(tensor)
        self.translating = self.translating or handed_out
        return private

    def read(self, value: Any, *, is_buffer: bool) -> Any:
        """The value of a model attribute: a buffer's private copy, else the tensor itself
        (or its copy, once one was made)."""
        if not isinstance(value, torch.Tensor):
            return value
        private = self._private.get(id(value))
        if private is not None:
            return private
        if is_buffer:
            return self._copy(value)
        self._note(value)
        return value

    def _note(self, value: torch.Tensor) -> None:
        """Remember ``value`` as the model's (copied before anything writes to it)."""
        if id(value) not in self._state:
            key = self._state[id(value)] = _storage_key(value)
            if key is not None:
                self._state_storages.setdefault(key, value)
            self._keep.append(value)

    def _note_model(self) -> None:
        """Every tensor the model holds (once, at the trace's first in-place op)."""
        root, self._root = self._root, None
        for module in root.modules() if root is not None else ():
            if isinstance(module, torch.jit.ScriptModule):
                continue
            for value in (*module._parameters.values(), *module._buffers.values(), *module.__dict__.values()):
                if isinstance(value, torch.Tensor) and id(value) not in self._private:
                    self._note(value)
                elif type(value) not in _SCALAR_ATTRIBUTES:  # (and in containers, two levels down, as _held finds them)
                    for item in tensors_in(value, 2):
                        if id(item) not in self._private:
                            self._note(item)

    def writable(self, value: Any) -> Any:
        """``value`` if an op may write to it freely, else its private counterpart."""
        if not isinstance(value, torch.Tensor):
            return value
        if self._root is not None:
            self._note_model()
        if not self._state:
            return value
        private = self._private.get(id(value))
        if private is not None:
            return private
        if id(value) in self._state:
            return self._copy(value, handed_out=True)
        key = _storage_key(value)
        if key is None or (key not in self._state_storages and key not in self._storages):
            return value
        if key not in self._storages:  # a view of a model tensor (``.data``, ``w[0]``): copy its base
            self._copy(self._state_storages[key], handed_out=True)
        return self._alias(value, key)

    def _alias(self, value: torch.Tensor, key: int) -> torch.Tensor:
        holder = self._storages[key]
        with torch.no_grad():
            alias = value.detach().new_empty(0).set_(
                holder.untyped_storage(), value.storage_offset(), value.size(), value.stride())
        self._private[id(value)] = alias
        self._keep.append(value)
        return alias

    def translate(self, value: Any) -> Any:
        """A value computed before its tensor was copied, seen through the copy."""
        if not self.translating or not isinstance(value, torch.Tensor):
            return value
        private = self._private.get(id(value))
        if private is not None:
            return private
        key = _storage_key(value) if self._storages else None
        return value if key is None or key not in self._storages else self._alias(value, key)

    def leaf(self, module: torch.nn.Module) -> Tuple[torch.nn.Module, bool]:
        """How a leaf call of ``module`` runs: the module to call (:meth:`module`; torch's own
        modules keep their parameters) and whether the call may draw random numbers."""
        draws = self._draws.get(id(module))
        if draws is None:
            draws = self._draws[id(module)] = module_may_draw(module)
        torch_owned = is_torch_module(module)
        shadow = self.module(module, copy_parameters=not torch_owned)
        if torch_owned and module._parameters and not module._modules:
            # Its parameters as plain attributes of a clone: `self.weight` in its forward then
            # finds them without nn.Module.__getattr__, which torch.fx patches while tracing
            # (three Python calls per read). torch's modules do not rebind their parameters.
            if shadow is module:
                shadow = object.__new__(type(module))
                shadow.__dict__.update(module.__dict__)
            shadow.__dict__.update(shadow._parameters)
        return shadow, draws

    def module(self, module: torch.nn.Module, *, copy_parameters: bool) -> torch.nn.Module:
        """The module a leaf call runs: a shallow clone (recursively) whose buffers that the
        call may write, and with ``copy_parameters`` whose parameters, are private copies,
        and which reads the private copy of any of its tensors the trace has written
        already; the module itself if none of that applies. (torch's own modules do not
        write their parameters, nor their buffers in eval mode without hooks; a user-defined
        submodule copies its parameters whatever its parent does.)"""
        known = self._shadows.get(id(module))
        if known is not None and known[1] == self.copies:  # (no copy made since: still right)
            return known[0]
        shadow = module
        if not isinstance(module, torch.jit.ScriptModule) and self._needs_shadow(module, copy_parameters):
            shadow = self._shadow(module, copy_parameters)
        self._shadows[id(module)] = (shadow, self.copies)
        self._keep.append(module)
        return shadow

    def _shadow(self, module: torch.nn.Module, copy_parameters: bool) -> torch.nn.Module:
        writes_buffers = copy_parameters or _may_write_buffers(module)
        shadow = object.__new__(type(module))
        shadow.__dict__.update(module.__dict__)
        for key, value in module.__dict__.items():  # plain tensor attributes (GraphModule's get_attr copies)
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                shadow.__dict__[key] = self.read(value, is_buffer=True)
        shadow.__dict__["_buffers"] = {k: self._private_or(b, copy=writes_buffers) for k, b in module._buffers.items()}
        shadow.__dict__["_parameters"] = {k: self._private_or(p, copy=copy_parameters)
                                          for k, p in module._parameters.items()}
        shadow.__dict__["_modules"] = {
            k: None if m is None else self.module(m, copy_parameters=copy_parameters or not is_torch_module(m))
            for k, m in module._modules.items()}
        return shadow

    def _private_or(self, tensor: Optional[torch.Tensor], *, copy: bool) -> Optional[torch.Tensor]:
        """``tensor``'s private copy: the one made already, else a new one if ``copy``, else ``tensor``."""
        if tensor is None:
            return None
        private = self._private.get(id(tensor))
        if private is not None:
            return private
        return self._copy(tensor) if copy else tensor

    def _needs_shadow(self, module: torch.nn.Module, copy_parameters: bool) -> bool:
        """Whether a call of ``module`` must run on a shadow (see :meth:`module`)."""
        private = self._private
        writes = copy_parameters or _may_write_buffers(module)
        if writes or private:  # (else: torch's code in eval mode and nothing copied yet: none of its own)
            if module._buffers:
                if any(b is not None and (writes or id(b) in private) for b in module._buffers.values()):
                    return True
            if module._parameters and (copy_parameters or private):
                if any(p is not None and (copy_parameters or id(p) in private) for p in module._parameters.values()):
                    return True
            # plain tensor attributes (GraphModule's get_attr copies) are copied as buffers are
            if torch.Tensor in set(map(type, module.__dict__.values())):  # (in C: no frame per attribute)
                return True
        children = module._modules
        return bool(children) and any(m is not None and self._needs_shadow(m, copy_parameters or not is_torch_module(m))
                                      for m in children.values())


def contents(value: Any) -> Optional[Iterable[Any]]:
    """What a trace looks into for tensors the model holds: the items of a list, tuple or
    dict, and the attributes of a plain object (a ``types.SimpleNamespace``, a user's config
    class); None for anything else (tensors, modules, classes, torch's and Python's objects)."""
    kind = type(value)
    if kind is dict:
        return value.values()
    if kind is list or kind is tuple:
        return value
    if kind.__module__ in _OPAQUE_MODULES or kind.__module__.startswith("torch") or isinstance(
            value, (torch.nn.Module, type, types.ModuleType)):
        return None
    attributes = getattr(value, "__dict__", None)
    return attributes.values() if type(attributes) is dict else None


_OPAQUE_MODULES = frozenset({"builtins", "functools", "collections", "enum", "typing", "abc"})


def tensors_in(container: Any, depth: int, kinds: Optional[Tuple[type, ...]] = None) -> Iterator[torch.Tensor]:
    """The tensors in what :func:`contents` looks into (and in what those hold, ``depth``
    levels in all): those of exactly the classes ``kinds``, or every tensor."""
    for item in contents(container) or ():
        if isinstance(item, torch.Tensor) if kinds is None else type(item) in kinds:
            yield item
        elif depth > 1 and type(item) not in _SCALAR_ATTRIBUTES:
            yield from tensors_in(item, depth - 1, kinds)


def _may_write_buffers(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` (alone, not its submodules) may write its buffers: not when
    it runs only torch's code in eval mode (BatchNorm updates its statistics only in
    training; hooks are user code) and is not lazy (a lazy module fills its tensors in on
    its first call)."""
    return (module.training or not runs_only_torch_code(module)
            or isinstance(module, torch.nn.modules.lazy.LazyModuleMixin))


class _NoState(TraceState):
    """Tracing without examples runs no op: nothing to copy."""

    def read(self, value: Any, *, is_buffer: bool) -> Any:
        return value

    def writable(self, value: Any) -> Any:
        return value

    def draws(self) -> Any:
        return contextlib.nullcontext()


NO_STATE: TraceState = _NoState()


# -- what Python code does to the model: snapshot and put back -------------------------------


class StateKeeper:
    """Remembers what Python code may change on the model and puts it back.

    For a trace (``retry=False``) torch's RNG and the model's generators are not
    part of it: the trace draws from private generators and never advances them
    (``TraceState.draws``). For a Specializer retry (``retry=True``) the graph's
    ops really drew from them, so their states are remembered too, and parameter
    versions are not checked (the checkpoint puts their values back)."""

    def __init__(self, root: Any, *, runs_ops: bool = True, retry: bool = False) -> None:
        self._module = root if isinstance(root, torch.nn.Module) else None
        self._retry = retry
        self.trace_state: TraceState = TraceState(root) if runs_ops else NO_STATE
        self._rng = torch.get_rng_state() if retry else None
        self._python_rng = random.getstate()
        numpy = sys.modules.get("numpy")
        self._numpy_rng = numpy.random.get_state() if numpy is not None else None
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self._cuda_rng = torch.cuda.get_rng_state_all() if cuda else None
        # Each module's attributes and its parameter/buffer/submodule tables, shallowly:
        # code that assigns `self.cache = x` or `self.count = self.count + 1` while traced
        # would otherwise leave proxies (or new tensors) on the user's model. `_live` holds
        # the __dict__ of every module, then their parameter, buffer and submodule tables;
        # `_values` all their values in one tuple, `_layouts` each table's keys (one tuple shared
        # by the tables with the same keys: no dict copy per table, which was most of the memory
        # a trace held besides the graph on models of many small modules).
        self._plain: List[Tuple[str, torch.nn.Module]] = []  # the modules whose tables are kept, named
        self._live: List[Dict[str, Any]] = []
        self._layouts: List[Tuple[str, ...]] = []
        self._values: Tuple[Any, ...] = ()
        self._values_of: Callable[[Any], Any] = dict.values  # how a table's values are read
        self._param_state: Tuple[List[bool], List[Any], List[int]] = ([], [], [])
        self._containers: List[Tuple[str, Any, Any]] = []  # (name, the user's container, its contents)
        self._generators: List[Tuple[torch.Generator, torch.Tensor]] = []
        # the parameters (named only when reported); _param_state: their (requires_grad, grad, _version)
        self._params: List[torch.nn.Parameter] = []
        self._tree: List[Tuple[str, torch.nn.Module]] = []
        # (name, module) of the modules with attributes other than numbers, strings and flags
        # (containers, tensors, generators, objects): the rest hold nothing to keep or to read
        self.attribute_holders: List[Tuple[str, torch.nn.Module]] = []
        # what forward rebound on the model's modules (put back; the graph repeats or the trace refuses)
        self.table_changes: List[TableChange] = []
        # what code the graph runs again made (a user-defined leaf, a leaf's hooks): not refused
        self.excused: set = set()
        self.changed: List[str] = []  # Python state forward changed that the graph does not change
        self._hooks: List[Dict[Any, Any]] = []
        self._hook_lengths: List[int] = []
        self._hook_items: List[Tuple[int, List[Tuple[Any, Any]]]] = []
        if self._module is None:
            return
        seen: set = set()
        tree = module_tree(self._module)
        # The tables of every module, copied shallowly in C (a Python loop over hundreds of
        # modules, twice per trace, was the largest part of specfx's cost without examples).
        # ScriptModules' tables are C++-backed (asked per class: isinstance against its metaclass is slow)
        scripted = {kind for kind in set(map(type, map(operator.itemgetter(1), tree)))
                    if issubclass(kind, torch.jit.ScriptModule)}
        script = [type(m) in scripted for _, m in tree] if scripted else [False] * len(tree)
        plain = list(itertools.compress(tree, map(operator.not_, script))) if scripted else tree
        attributes = [m.__dict__ for _, m in plain]
        tables = [*attributes, *map(_PARAMETERS, attributes), *map(_BUFFERS, attributes), *map(_CHILDREN, attributes)]
        self._plain = plain
        self._live = tables
        # The hook tables (dicts torch mutates in place): code that registers a hook while traced
        # (transformers installs its output-collecting hooks on the first call that asks for
        # hidden states) must not leave it on the model; their lengths tell a change, in C
        self._hooks = _hook_tables(attributes)
        self._hook_lengths = list(map(len, self._hooks))
        self._hook_items = [(i, list(table.items())) for i, table in enumerate(self._hooks) if table]
        # Offloading libraries (compressed-tensors inside llm-compressor's oneshot, accelerate)
        # replace a module's tables with mappings that are not dicts: read those through their
        # own values() (told once per trace, in C, for the common all-dict case)
        self._values_of = dict.values if set(map(type, tables)) == _ONLY_DICT else _VALUES
        self._values = tuple(itertools.chain.from_iterable(map(self._values_of, tables)))
        shared: Dict[Tuple[str, ...], Tuple[str, ...]] = {}
        self._layouts = list(map(shared.setdefault, *itertools.tee(map(tuple, tables))))  # one per distinct layout
        # the parameters in named_parameters()'s order (shared ones once), with their autograd
        # state, gathered in C: ids are unique, so a dict keyed by them keeps each one once
        parameter_tables = ([m._parameters if is_script else m.__dict__["_parameters"]
                             for (_, m), is_script in zip(tree, script)]
                            if scripted else tables[len(plain):2 * len(plain)])  # (plain is the tree)
        flat = list(itertools.chain.from_iterable(  # (a ScriptModule's table is a C++ view, not a dict)
            map(_VALUES if scripted else self._values_of, parameter_tables)))
        self._params = [p for p in dict(zip(map(id, flat), flat)).values() if p is not None]
        self._param_state = _parameter_state(self._params)
        self._tree = tree
        # Most attributes are numbers, strings and flags: a module whose attributes (not its
        # tables) are all of those is told in C, once per distinct key layout for the keys.
        own_keys: Dict[int, Tuple[str, ...]] = {}
        holders = self.attribute_holders
        for (name, module), table, layout in zip(plain, attributes, self._layouts):
            keys = own_keys.get(id(layout))
            if keys is None:
                keys = own_keys[id(layout)] = tuple(itertools.filterfalse(_TABLES.__contains__, layout))
            if keys and not _SCALAR_ATTRIBUTES.issuperset(map(type, map(table.__getitem__, keys))) and not all(
                    type(v) is tuple and _SCALAR_ATTRIBUTES.issuperset(map(type, v))  # (sizes: kernel_size=(3, 3))
                    for v in map(table.__getitem__, keys) if type(v) not in _SCALAR_ATTRIBUTES):
                holders.append((name, module))
        for name, module in holders:
            table = module.__dict__
            for key in itertools.filterfalse(_TABLES.__contains__, table):
                value = table[key]
                # (isinstance(x, torch.Generator) runs Python code: asked only of unusual types)
                # (a generator: the trace draws from a private one, but forward may seed it before
                # specfx refuses that: then it is put back)
                if type(value) in _MUTABLE or (type(value) not in _PLAIN_ATTRIBUTES
                                               and isinstance(value, torch.Generator)):
                    self._remember(f"{name}.{key}" if name else key, value, seen, 4)
        holders.extend((name, m) for (name, m), is_script in zip(tree, script) if is_script)

    def _remember(self, name: str, value: Any, seen: set, depth: int) -> None:
        """Snapshot mutable containers (deeply) and generators held by the model."""
        if isinstance(value, torch.Generator):
            self._generators.append((value, value.get_state()))
            return
        if depth == 0 or id(value) in seen or not isinstance(value, (list, dict, set)):
            return
        seen.add(id(value))
        contents: Any = dict(value) if isinstance(value, dict) else (set(value) if isinstance(value, set) else list(value))
        self._containers.append((name, value, contents))
        items = value.values() if isinstance(value, dict) else value
        for item in list(items):
            self._remember(name + "[...]", item, seen, depth - 1)

    def _parameter_names(self) -> Dict[int, str]:
        """id -> qualified name of each kept parameter (its first name, as named_parameters())."""
        names: Dict[int, str] = {}
        for module_name, module in self._tree:
            for key, param in module._parameters.items():
                if param is not None and id(param) not in names:
                    names[id(param)] = f"{module_name}.{key}" if module_name else key
        return names

    def _restore_tables(self) -> None:
        """Put back every table that changed, noting each change (``table_changes``)."""
        count, start = len(self._plain), 0
        for index, (table, keys) in enumerate(zip(self._live, self._layouts)):
            name = self._plain[index % count][0]
            saved = dict(zip(keys, self._values[start:start + len(keys)]))
            start += len(keys)
            kind = _TABLE_KINDS[index // count]
            for key, before, after in _restore_table(table, saved):
                if (f"{name}.{key}" if name else key) in self.excused:
                    continue  # (code the graph calls again made it: the graph repeats it)
                if isinstance(after, torch.fx.Proxy) and _updates_in_place(after, f"{name}.{key}" if name else key):
                    continue  # `self.steps += 1` on a buffer: an in-place op the graph performs
                self.table_changes.append(TableChange(name, kind, key, before, after))

    @contextlib.contextmanager
    def excusing(self) -> Iterator[None]:
        """Changes made to the model inside the ``with`` block are the graph's to repeat (a
        user-defined leaf module, or a leaf's hooks, ran for its value: the graph calls it again,
        and it changes the model then as it does in eager): not refused, still put back."""
        if self._module is None:
            yield
            return
        # (keys and values of every table, gathered in C: the common case is that nothing changed)
        layouts = list(map(tuple, self._live))
        values = tuple(itertools.chain.from_iterable(map(self._values_of, self._live)))
        contents = [_contents_of(container) for _, container, _ in self._containers]
        try:
            yield
        finally:
            if not (list(map(tuple, self._live)) == layouts and all(map(
                    operator.is_, itertools.chain.from_iterable(map(self._values_of, self._live)), values))):
                self._excuse_tables(layouts, values)
            for (_, container, _), before in zip(self._containers, contents):
                if _contents_of(container) != before:
                    self.excused.add(id(container))

    def _excuse_tables(self, layouts: List[Tuple[str, ...]], values: Tuple[Any, ...]) -> None:
        """Note the table entries that differ from ``layouts``/``values`` (as excusing() read them)."""
        count, start = len(self._plain), 0
        for index, (table, keys) in enumerate(zip(self._live, layouts)):
            before = dict(zip(keys, values[start:start + len(keys)]))
            start += len(keys)
            if list(table) == list(keys) and all(map(operator.is_, self._values_of(table), before.values())):
                continue
            name = self._plain[index % count][0]
            self.excused.update(f"{name}.{key}" if name else key for key in {*table, *before}
                                if table.get(key, _ABSENT) is not before.get(key, _ABSENT))

    def _restore_hooks(self) -> None:
        """Put back every hook table as it was (hooks registered or removed while traced)."""
        if list(map(len, self._hooks)) == self._hook_lengths and all(
                list(self._hooks[i].items()) == items for i, items in self._hook_items):
            return
        saved = dict(self._hook_items)
        for index, table in enumerate(self._hooks):
            before = saved.get(index, [])
            if list(table.items()) == before:
                continue
            keys = {key for key, _ in before}
            for key in [k for k in table if k not in keys]:  # key by key, never clear(): other threads
                del table[key]
            for key, hook in before:
                if table.get(key, _ABSENT) is not hook:
                    table[key] = hook

    @property
    def protect(self) -> Any:  # the tracer's hook before a write (kept for callers of the old name)
        return self.trace_state.writable

    def restore(self) -> None:
        """Put Python's and numpy's RNG states, module attributes (``training`` flags
        included), containers and parameters' autograd flags back (and, for a retry,
        torch's RNG and the model's generators)."""
        if self._rng is not None:
            torch.set_rng_state(self._rng)
        random.setstate(self._python_rng)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self._numpy_rng is not None:
            numpy.random.set_state(self._numpy_rng)
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)
        for generator, state in self._generators:
            # (a trace draws from private generators: the user's changed only if forward seeded it,
            # refused; another thread's draws meanwhile stay)
            if not self._retry and not any(g is generator for g in self.trace_state.controlled):
                continue
            if not torch.equal(generator.get_state(), state):
                generator.set_state(state)
        live = self._live
        # (nothing changed, the common case: every value of every table the same object, told in C)
        if not (len(self._values) == sum(map(len, live))
                and all(map(operator.is_, itertools.chain.from_iterable(map(self._values_of, live)), self._values))
                and list(map(tuple, live)) == self._layouts):
            self._restore_tables()
        self._restore_hooks()
        for name, container, contents in self._containers:
            if restore_contents(container, contents) and id(container) not in self.excused:
                self.changed.append(name)
        lost = []
        now = _parameter_state(self._params)
        before = self._param_state
        unchanged = (now[0] == before[0] and all(map(operator.is_, now[1], before[1]))
                     and (self._retry or now[2] == before[2]))
        names = None
        for param, requires_grad, grad, version in (() if unchanged else zip(self._params, *before)):
            if param.requires_grad is requires_grad and param.grad is grad and (param._version == version or self._retry):
                continue
            if names is None:
                names = self._parameter_names()
            name = names[id(param)]
            if param.requires_grad != requires_grad:
                param.requires_grad_(requires_grad)
                self.changed.append(f"{name}.requires_grad")
            if param.grad is not grad:
                param.grad = grad
                self.changed.append(f"{name}.grad")
            if param._version != version and not self._retry:
                lost.append(name)
        if lost:
            warnings.warn(
                f"tracing changed parameter(s) {', '.join(lost)} in place and specfx could not undo it "
                f"(the write happened inside an op it cannot see into); reload the state_dict",
                RuntimeWarning,
                stacklevel=3,
            )


_ABSENT = object()
# The tables kept per module, in the order of `StateKeeper._live`
_TABLE_KINDS = ("attributes", "parameters", "buffers", "modules")


class TableChange(NamedTuple):
    """A key forward bound, rebound or deleted in one of a module's tables (``ABSENT``: none)."""

    module: str  # the module's qualified name ('' for the root)
    table: str  # one of _TABLE_KINDS
    key: str
    before: Any
    after: Any

    @property
    def path(self) -> str:
        return f"{self.module}.{self.key}" if self.module else self.key


ABSENT = _ABSENT
_VALUES = operator.methodcaller("values")
_ONLY_DICT = {dict}
_PARAMETERS = operator.itemgetter("_parameters")
_BUFFERS = operator.itemgetter("_buffers")
_CHILDREN = operator.itemgetter("_modules")


_HOOK_NAMES = tuple(name for name, value in torch.nn.Module().__dict__.items()
                    if "_hooks" in name and isinstance(value, dict))
_HOOKS_OF = operator.itemgetter(*_HOOK_NAMES)


def _hook_tables(attributes: List[Dict[str, Any]]) -> List[Dict[Any, Any]]:
    """Every hook table of the modules whose ``__dict__`` are ``attributes``, in one list."""
    try:
        return list(itertools.chain.from_iterable(map(_HOOKS_OF, attributes)))
    except KeyError:  # (a module whose __init__ did not run nn.Module's: the tables it has)
        return [a[name] for a in attributes for name in _HOOK_NAMES if isinstance(a.get(name), dict)]


def _parameter_state(params: List[torch.nn.Parameter]) -> Tuple[List[bool], List[Any], List[int]]:
    """The parameters' ``requires_grad`` flags, ``grad`` tensors and versions (read in C)."""
    return (list(map(_REQUIRES_GRAD, params)), list(map(_GRAD, params)), list(map(_VERSION, params)))


_REQUIRES_GRAD = operator.attrgetter("requires_grad")
_GRAD = operator.attrgetter("grad")
_VERSION = operator.attrgetter("_version")
# nn.Module's own tables (parameters, buffers, submodules, hook dicts...): restored by identity
# as tables or left to torch; containers the user's code keeps are the rest.
_TABLES = frozenset(torch.nn.Module().__dict__)
_MUTABLE = (list, dict, set, collections.OrderedDict)
# Attribute types that hold nothing a trace must keep or read (no container, tensor or generator).
_SCALAR_ATTRIBUTES = frozenset({int, float, bool, str, bytes, complex, type(None), torch.dtype, torch.device,
                                torch.Size, torch.memory_format, torch.layout})
# Attribute types that are neither containers nor generators (sizes, flags, names, tensors).
_PLAIN_ATTRIBUTES = frozenset({int, float, bool, str, bytes, complex, tuple, type(None), torch.dtype, torch.device,
                               torch.Size, torch.Tensor, torch.nn.Parameter})


def module_tree(root: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """``root.named_modules()`` as a list (each module once, in the same order), walked
    in one frame: named_modules' recursive generators cost a resumed frame per module and
    level, for every module of the model, several times per trace."""
    found: List[Tuple[str, torch.nn.Module]] = []
    seen: set = set()
    stack = [("", root)]
    while stack:
        name, module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        found.append((name, module))
        children = module.__dict__.get("_modules")
        if children is None:  # (a ScriptModule's table is a C++ view)
            children = module._modules
        if children:
            prefix = name + "." if name else ""
            for key, child in reversed(children.items()):
                if child is not None:
                    stack.append((prefix + key, child))
    return found


def _contents_of(container: Any) -> Any:
    """The items of a list, dict or set, by identity (compared with ``==`` of the result)."""
    if isinstance(container, dict):
        return [(key, id(value)) for key, value in container.items()]
    return sorted(map(id, container)) if isinstance(container, set) else list(map(id, container))


def restore_contents(container: Any, contents: Any) -> bool:
    """Put ``contents`` back into the user's container in place; whether it had changed."""
    if isinstance(container, dict):
        if container.keys() == contents.keys() and all(container[k] is v for k, v in contents.items()):
            return False
        for key in [k for k in container if k not in contents]:
            del container[key]
        container.update(contents)
        return True
    if isinstance(container, set):
        if container == contents:
            return False
        container.clear()
        container.update(contents)
        return True
    if len(container) == len(contents) and all(a is b for a, b in zip(container, contents)):
        return False
    container[:] = contents
    return True


def _updates_in_place(value: Any, qualified: str) -> bool:
    """``self.steps += 1``: the proxy bound back is an in-place op on that very attribute,
    which the graph performs, so no state is lost."""
    node = value.node
    first = node.args[0] if node.args else None
    return (isinstance(first, torch.fx.Node) and first.op == "get_attr" and first.target == qualified
            and (node.target in INPLACE_FUNCTIONS or (isinstance(node.target, str) and node.target.endswith("_"))))


def _restore_table(live: Dict[str, Any], saved: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """Make ``live`` hold exactly the objects ``saved`` held (by identity); return the
    (key, value before, value after) of each key that changed (``_ABSENT`` for none)."""
    # Unchanged (the common case, four tables per module): the same keys in the same order
    # bound to the same objects, compared in C; a reordered table takes the slow path below.
    if list(live) == list(saved) and all(map(operator.is_, live.values(), saved.values())):
        return []
    changes = [(k, saved.get(k, _ABSENT), v) for k, v in live.items() if saved.get(k, _ABSENT) is not v]
    changes += [(k, v, _ABSENT) for k, v in saved.items() if k not in live]
    # Key by key, never clear(): other threads may be running this module meanwhile.
    for key in [k for k in live if k not in saved]:
        del live[key]
    for key, value in saved.items():
        if live.get(key, _ABSENT) is not value:
            live[key] = value
    return changes


@contextlib.contextmanager
def preserved_state(root: Any, *, runs_ops: bool = True) -> Iterator[StateKeeper]:
    """Snapshot what Python code may change on ``root`` and the RNGs; restore them on exit.
    ``runs_ops=False`` (a symbolic trace) needs no tensor copies."""
    keeper = StateKeeper(root, runs_ops=runs_ops)
    try:
        yield keeper
    finally:
        keeper.restore()
