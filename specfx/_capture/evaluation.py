"""Computing a node's concrete value from the values of its inputs.

Used by the tracer for every new node. Values hide no proxies: an input
without a value (traced symbolically, or a proxy hidden inside an opaque
object that reaches the tracer while the op runs) leaves the node without one.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple

import torch
from torch.fx._symbolic_trace import _orig_module_call
from torch.fx.node import map_aggregate
from torch.fx.proxy import Proxy
from torch.utils._python_dispatch import TorchDispatchMode

from .._policy.describe import function_path
from .values import MISSING, SHAPE_ATTRIBUTES, SHAPE_METHODS, ValueProxy, state_of, value_of

try:  # the helper ShapeProp uses; fall back to shape/dtype only if a torch version lacks it
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
except ImportError:  # pragma: no cover - depends on the torch version
    _extract_tensor_metadata = None  # type: ignore[assignment]  # checked for None before use

__all__ = ["INPLACE_FUNCTIONS", "PrivateDraws", "StateView", "Unevaluable", "callable_from_torch", "concrete_values",
           "is_random_name", "is_torch_module", "runs_only_torch_code",
           "module_may_draw", "provenance", "proxies_in", "run_op", "tensor_meta", "tensor_metadata"]


class Unevaluable(BaseException):
    """A proxy reached the tracer while a concrete value was being computed (it hid
    inside an object the evaluation could not see into): that node has no value.
    A BaseException, so that ``except Exception`` in model code cannot swallow it."""


INPLACE_FUNCTIONS = frozenset(
    {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
     operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
     operator.ilshift, operator.irshift, operator.imatmul}
)


class StateView(Protocol):
    """The trace's private view of the model's tensors (``specfx._capture.state.TraceState``)."""

    def read(self, value: Any, *, is_buffer: bool) -> Any: ...
    def writable(self, value: Any) -> Any: ...
    translating: bool
    controlled: List[torch.Generator]  # generators forward seeded (refused): put back after the trace

    def translate(self, value: Any) -> Any: ...
    def leaf(self, module: torch.nn.Module) -> Tuple[torch.nn.Module, bool]: ...
    def draws(self) -> ContextManager[Any]: ...


def concrete_values(
    args: Tuple[Any, ...], kwargs: Dict[str, Any], translate: Optional[Callable[[Any], Any]] = None
) -> Optional[Tuple[Any, Any]]:
    """``(args, kwargs)`` with every proxy replaced by its value (seen through
    ``translate``: a model tensor copied since is read as its copy); None if one has none."""
    missing = False

    def concrete(a: Any) -> Any:
        nonlocal missing
        if isinstance(a, Proxy):
            value = value_of(a)
            if value is MISSING:
                missing = True
            return value if translate is None else translate(value)
        return a

    values = map_aggregate(args, concrete)
    kw_values = map_aggregate(kwargs, concrete) if kwargs else {}  # (most calls have no kwargs)
    return None if missing else (values, kw_values)


def run_op(
    root: torch.nn.Module, kind: str, target: Any, values: Any, kw_values: Any, state: StateView,
    leaf: Optional[torch.nn.Module] = None,
) -> Any:
    """Run one node's op eagerly, on the trace's private copies of whatever of the
    model's state it may write to (``state``): the user's tensors are never written.
    (The caller turns torch.fx's "is tracing" answer off around it: code run for its value
    inside a trace asks "am I traced?" and must take its eager path.)
    ``leaf`` is the module a ``call_module`` node calls (default: found by name)."""
    try:
        if kind == "get_attr":
            owner, _, name = target.rpartition(".")
            module = root.get_submodule(owner) if owner else root
            return state.read(getattr(module, name), is_buffer=name not in module._parameters)
        if kind == "call_function":
            if values and (target in INPLACE_FUNCTIONS or getattr(target, "__name__", "").endswith("_")):
                values = (state.writable(values[0]), *values[1:])
            if _function_may_draw(target):
                with state.draws():
                    return target(*values, **kw_values)
            return target(*values, **kw_values)
        if kind == "call_method":
            if target.endswith("_") and not target.startswith("_"):
                values = (state.writable(values[0]), *values[1:])
            if is_random_name(target) or (isinstance(values[0], type) and issubclass(values[0], torch.autograd.Function)):
                # (a custom autograd Function's forward may draw: stochastic rounding)
                with state.draws():
                    return getattr(values[0], target)(*values[1:], **kw_values)
            return getattr(values[0], target)(*values[1:], **kw_values)
        if kind == "call_module":
            module = root.get_submodule(target) if leaf is None else leaf
            if (values or kw_values) and may_write_inputs(module):  # (`nn.ReLU(inplace=True)` on a model tensor)
                values, kw_values = map_aggregate(values, state.writable), map_aggregate(kw_values, state.writable)
            shadow, draws = state.leaf(module)
            # torch.fx's own unpatched Module.__call__: its tracing wrapper (a closure, the
            # autowrap scan of the module's globals, the tracer's call_module hook) would only
            # hand the call back here, at a cost several times that of a small leaf's forward
            if draws:
                with state.draws():
                    return _orig_module_call(shadow, *values, **kw_values)
            return _orig_module_call(shadow, *values, **kw_values)
        raise ValueError(f"unknown node kind {kind!r}")
    except Unevaluable:
        raise
    except Exception as error:
        if hasattr(error, "add_note"):  # Python >= 3.11
            error.add_note(f"(raised while specfx computed the example value of a `{_describe_target(target)}` call)")
        raise


# -- random draws ---------------------------------------------------------------------------

# Substrings of the names of ops that may draw random numbers (over-matching costs a
# dispatch mode around one op; under-matching would let an op draw from the user's RNG).
_RANDOM_NAMES = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "exponential", "cauchy",
                 "geometric", "log_normal", "rrelu", "poisson", "attention", "gumbel", "sample", "shuffle")


@functools.lru_cache(maxsize=4096)  # asked for every op: op names repeat, the check runs once per name
def is_random_name(name: str) -> bool:
    """Whether an op called ``name`` may draw random numbers (by name)."""
    lowered = name.lower()
    return any(part in lowered for part in _RANDOM_NAMES)


def is_torch_module(module: torch.nn.Module) -> bool:
    """Whether ``module``'s class is torch's own (not user code)."""
    cls = type(module)
    known = _TORCH_OWNED.get(cls)  # (asked several times per leaf call: one lookup by class)
    if known is None:
        if len(_TORCH_OWNED) > 4096:  # (classes made on the fly: do not keep them all)
            _TORCH_OWNED.clear()
        known = _TORCH_OWNED[cls] = cls.__module__.startswith(("torch.nn", "torch.ao.nn"))
    return known


_TORCH_OWNED: Dict[type, bool] = {}


def runs_only_torch_code(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` (its own forward, not its submodules') runs only torch's
    code: its class is torch's and no forward hook of its own or global one (user code) runs."""
    if not is_torch_module(module) or module._forward_pre_hooks or module._forward_hooks:
        return False
    return not (_MODULE_GLOBALS._global_forward_pre_hooks or _MODULE_GLOBALS._global_forward_hooks)


_MODULE_GLOBALS = torch.nn.modules.module  # (where torch keeps the global hooks)


def may_write_inputs(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` may write its input tensors: it (or a submodule) is
    user-defined or torch's with ``inplace=True``."""
    return _in_tree(module, _writes_inputs)


def _writes_inputs(module: torch.nn.Module) -> bool:
    return not is_torch_module(module) or module.__dict__.get("inplace") is True


def _in_tree(module: torch.nn.Module, test: Callable[[torch.nn.Module], bool]) -> bool:
    """Whether ``test`` holds for ``module`` or one of its submodules."""
    if not module._modules:  # (most leaves: no generator over the tree)
        return test(module)
    return any(map(test, module.modules()))


def callable_from_torch(target: Any) -> bool:
    """Whether a ``call_function`` target is torch's, specfx's (guards) or a Python builtin
    (else: user code)."""
    module = getattr(target, "__module__", None) or ""
    return module.startswith(("torch", "specfx")) or module in ("_operator", "operator", "builtins", "math")


def _function_may_draw(target: Any) -> bool:
    # a user's wrapped function runs anything
    return not callable_from_torch(target) or is_random_name(getattr(target, "__name__", ""))


def module_may_draw(module: torch.nn.Module) -> bool:
    """Whether calling ``module`` may draw random numbers: it (or a submodule) is
    user-defined, a dropout/RReLU, or has a ``dropout`` probability (attention, RNNs)."""
    return _in_tree(module, _draws_itself)


def _draws_itself(module: torch.nn.Module) -> bool:
    cls = type(module)
    by_class = _DRAWS_BY_CLASS.get(cls)
    if by_class is None:
        if len(_DRAWS_BY_CLASS) > 4096:
            _DRAWS_BY_CLASS.clear()
        by_class = _DRAWS_BY_CLASS[cls] = not is_torch_module(module) or is_random_name(cls.__name__)
    if by_class:
        return True
    # (a plain attribute: getattr would go through nn.Module.__getattr__, patched while tracing)
    probability = module.__dict__.get("dropout")
    return isinstance(probability, float) and probability > 0


_DRAWS_BY_CLASS: Dict[type, bool] = {}  # a user's class, or torch's dropout-like ones, draw whatever the attributes


class PrivateDraws(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    """Random ops in this thread draw from private generators: ``generator(g)`` gives
    the private counterpart of ``g`` (``None``: torch's default CPU generator), a
    generator in the same state, so the values are those eager would draw while
    the user's generators are never advanced. Another thread's draws are not
    affected (dispatch modes are per thread). An op without a generator argument
    (``torch.native_dropout``) runs with the default generator's state swapped for
    the private one's around it. Ops on other devices draw as they would."""

    def __init__(self, generator: Callable[[Optional[torch.Generator]], torch.Generator]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self._generator = generator

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded not in func.tags or not _on_cpu(args, kwargs):
            return func(*args, **kwargs)
        routed = _generator_overload(func)
        if routed is None:
            with _swapped_default(self._generator(None)):
                return func(*args, **kwargs)
        user = kwargs.get("generator")
        if user is not None and user.device.type != "cpu":
            return func(*args, **kwargs)
        return routed(*args, **{**kwargs, "generator": self._generator(user)})


def _on_cpu(args: Any, kwargs: Dict[str, Any]) -> bool:
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    return all(a.device.type == "cpu" for a in args if isinstance(a, torch.Tensor))


_OVERLOADS: Dict[Any, Any] = {}


def _generator_overload(func: Any) -> Any:
    """``func`` itself if it takes ``generator=`` as a keyword, else its overload that
    does and otherwise takes the same arguments (``randn.default`` -> ``randn.generator``),
    else None."""
    if func in _OVERLOADS:
        return _OVERLOADS[func]
    names = [a.name for a in func._schema.arguments if a.name != "generator"]
    found = None
    for candidate in [func] + [getattr(func.overloadpacket, o) for o in func.overloadpacket.overloads()]:
        arguments = candidate._schema.arguments
        generator = [a for a in arguments if a.name == "generator"]
        if generator and generator[0].kwarg_only and [a.name for a in arguments if a.name != "generator"] == names:
            found = candidate
            break
    _OVERLOADS[func] = found
    return found


@contextlib.contextmanager
def _swapped_default(private: torch.Generator) -> Iterator[None]:
    default = torch.default_generator
    saved = default.get_state()
    default.set_state(private.get_state())
    try:
        yield
    finally:
        private.set_state(default.get_state())
        default.set_state(saved)


_RANDOM = frozenset({
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like, torch.randn_like,
    torch.randint_like, torch.bernoulli, torch.multinomial, torch.normal, torch.poisson,
    "random_", "uniform_", "normal_", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_",
})


def provenance(
    kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], value: Any
) -> Tuple[bool, bool]:
    """``(from_shapes, degenerate)`` of a new node's value: computed from shapes only
    (int() of it is a SHAPES decision), and read from a size-0/1 dimension
    (decisions on it are degenerate)."""
    if kind not in ("call_function", "call_method"):  # module calls and attributes: neither
        return False, False
    shape_read = (kind == "call_method" and target in SHAPE_METHODS) or (
        target is getattr and len(args) > 1 and args[1] in SHAPE_ATTRIBUTES
    )
    if not shape_read:
        # Most ops take a tensor first: a proxy not computed from shapes makes the node
        # data, whatever else it takes (no need to look through every argument).
        for arg in args:
            if type(arg) is ValueProxy:
                if not state_of(arg).from_shapes:
                    return False, False
                break
    inputs = list(proxies_in(args, kwargs))
    if target in _RANDOM:  # random data of a shape-derived size is data, not a shape
        return False, False
    derived = kind in ("call_function", "call_method") and bool(inputs) and all(
        state_of(a).from_shapes for a in inputs
    )
    if not (shape_read or derived):
        return False, False
    reads_size = (kind == "call_method" and target in ("size", "numel", "nelement")
                  and (target != "size" or len(args) > 1 or bool(kwargs))) or (
        target is operator.getitem and isinstance(value_of(args[0]), torch.Size))
    degenerate = (reads_size and type(value) is int and value in (0, 1)) or any(
        state_of(a).degenerate for a in inputs
    )
    return True, degenerate


def proxies_in(args: Sequence[Any], kwargs: Dict[str, Any]) -> Iterator[ValueProxy]:
    """The specfx proxies anywhere in ``args``/``kwargs`` (lists, tuples, dicts, slices)."""
    found: list[ValueProxy] = []

    def collect(a: Any) -> Any:
        if isinstance(a, ValueProxy):
            found.append(a)
        return a

    map_aggregate((tuple(args), kwargs), collect)
    return iter(found)


def _describe_target(target: Any) -> str:
    if isinstance(target, str):
        return target
    return function_path(target)


def tensor_meta(value: Any) -> Any:
    """``node.meta["tensor_meta"]`` for a tensor or a list/tuple of tensors (as ShapeProp stores it)."""
    if isinstance(value, torch.Tensor):
        return tensor_metadata(value)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        container = type(value) if type(value) in (tuple, list) else tuple  # namedtuples: plain tuple
        return container(tensor_metadata(v) for v in value)
    return None


# TensorMetadata is an immutable named tuple that depends only on this key for ordinary
# (strided, non-quantized) tensors, and torch computes its memory format slowly in Python.
_METADATA_CACHE: Dict[Tuple[Any, ...], Any] = {}


def tensor_metadata(tensor: torch.Tensor) -> Any:
    """``node.meta["tensor_meta"]`` for one tensor."""
    if _extract_tensor_metadata is None:  # pragma: no cover - depends on the torch version
        return {"shape": tensor.shape, "dtype": tensor.dtype}
    if tensor.layout is not torch.strided or tensor.is_quantized:
        return _extract_tensor_metadata(tensor)
    key = (tensor.shape, tensor.stride(), tensor.dtype, tensor.requires_grad)
    meta = _METADATA_CACHE.get(key)
    if meta is None:
        if len(_METADATA_CACHE) > 8192:
            _METADATA_CACHE.clear()
        meta = _METADATA_CACHE[key] = _extract_tensor_metadata(tensor)
    return meta
