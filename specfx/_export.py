"""``export``: a specialized graph as a ``torch.export.ExportedProgram``, with every
guard lowered to a check that export, PT2E quantization and ``torch.compile`` keep.

A specfx guard is a Python function: under ``torch.export`` it would run once on
fake values (``bool()`` of a data-dependent value fails there, a length check
passes and leaves nothing), and under ``torch.compile`` it breaks the graph.
Lowered, each guard kind becomes what those tools keep as part of the program:

- a value read from tensor data (``bool``, ``int``, ``float``, ``item``, ``tolist``...)
  becomes ``aten._assert_async.msg(condition, message)`` on the tensor, with the
  specfx message (the assumption and the user's source line);
- a value that depends on a dynamic dimension (a shape predicate, ``x.size(0)``) becomes the
  same assertion on the symbolic size (``sym_size`` → ``scalar_tensor`` → assert);
- ``dtype`` and ``device`` become ``aten._assert_tensor_metadata``;
- a value export itself fixed (a dimension it specialized, the length of a list, a
  dict's keys, an argument that is ``None``) is checked once while exporting and is
  then enforced by export's own input checks (its input spec and shape guards).

:func:`lower_guards` is the graph pass (keyed on the guard kinds). The same
lowering runs whenever a guard is reached under ``torch.compile``
(see :func:`lowered_guard`), so compiled specfx graphs do not break at guards.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Set, Tuple, Union

import torch
import torch.fx
from torch.export import Dim
from torch.fx.node import has_side_effect

from . import guards as _guards
from ._decisions import Specialization
from ._report import list_decisions
from .guards import GUARDS, GuardKind
from ._trace import PolicyLike, trace
from .errors import GuardError, SpecializationWarning

__all__ = ["export", "lower_guards", "lowered_guard"]

DynamicShapes = Union[str, Dict[str, Any], Tuple[Any, ...], list, None]

_RETRACE = (
    "The program is only valid for inputs that keep this assumption. Retrace or export again with an "
    "example input like this one (specfx.export(model, example_inputs, policy=...))."
)


def _message(assumption: str, broken: str, where: str) -> str:
    return (
        f"specfx guard failed: the graph was specialized assuming {assumption}, "
        f"but for this input {broken}.\n  assumed at {where}\n{_RETRACE}"
    )


def _one_line(message: str) -> str:
    """The message as Inductor can embed it in a C++ string literal (it escapes nothing)."""
    return message.replace("\\", "/").replace('"', "'").replace("\n", " ")


def _is_symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymBool, torch.SymInt, torch.SymFloat))


def _assert(condition: Any, message: str, what: str, expected: Any, where: str) -> None:
    """Emit ``condition`` as a run-time assertion: a tensor or a symbolic bool becomes
    ``aten._assert_async.msg``; a plain bool is known while exporting and checked now."""
    if isinstance(condition, torch.Tensor):
        torch.ops.aten._assert_async.msg(condition.all(), _one_line(message))
    elif isinstance(condition, bool) or torch.compiler.is_dynamo_compiling():
        # known now; under dynamo a condition on sizes becomes a guard of the compiled code
        # (an input that breaks it recompiles, and this raises while compiling)
        if not condition:
            raise GuardError(message, expected=expected, actual="<other>", where=where)
    else:  # export: scalar_tensor keeps the size symbolic (no guard on it), so it is checked per call
        torch.ops.aten._assert_async.msg(torch.ops.aten.scalar_tensor.default(condition), _one_line(message))


def _equal(value: Any, expected: Any) -> Any:
    """``value == expected`` as a tensor, symbolic or plain bool; floats compare as the
    guards do (NaN matches NaN, -0.0 is not 0.0)."""
    if not isinstance(value, torch.Tensor):
        return value == expected
    if isinstance(expected, (list, tuple)):
        expected = torch.tensor(expected, dtype=value.dtype)
        if value.is_floating_point():
            return (value == expected) & (torch.signbit(value) == torch.signbit(expected)) | (
                torch.isnan(value) & torch.isnan(expected))
        return value == expected
    if isinstance(expected, float) and math.isnan(expected):
        return torch.isnan(value)
    if isinstance(expected, float) and expected == 0.0:
        return (value == 0.0) & (torch.signbit(value) == (math.copysign(1.0, expected) < 0))
    return value == expected


def _check_truth(value: Any, expected: bool, what: str, where: str) -> None:
    message = _message(f"{what} == {expected}", f"{what} == {not expected}", where)
    if isinstance(value, torch.Tensor):
        condition: Any = value.bool() if expected else value.logical_not()
    elif isinstance(value, bool) or torch.compiler.is_dynamo_compiling():
        condition = bool(value) is expected
    else:  # a symbolic bool or number: as a tensor, without guarding on it
        number = torch.ops.aten.scalar_tensor.default(value)
        condition = number != 0 if expected else number == 0
    _assert(condition, message, what, expected, where)


def _number_check(convert: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., None]:
    """A check that ``convert(value)`` (``int()``, ``float()``, ``.item()``...) is the traced value."""

    def check(value: Any, expected: Any, what: str, where: str) -> None:
        message = _message(f"{what} == {expected!r}", f"{what} != {expected!r}", where)
        if isinstance(value, torch.Tensor):
            _assert(_equal(convert(value), expected), message, what, expected, where)
        else:
            _assert(_equal(value, expected), message, what, expected, where)

    return check


def _truncate(value: torch.Tensor) -> torch.Tensor:
    return torch.trunc(value) if value.is_floating_point() else value  # int() rounds toward zero


def _check_size(value: Any, dim: int, expected: int, what: str, where: str) -> None:
    message = _message(f"{what} == {expected}", f"{what} != {expected}", where)
    _assert(_equal(value.size(dim), expected), message, what, expected, where)


def _check_shape(value: Any, expected: Tuple[int, ...], what: str, where: str) -> None:
    if value.dim() != len(expected):
        _static(value.dim(), len(expected), f"{what} (its length)", where)
    for dim, size in enumerate(expected):
        _check_size(value, dim, size, f"{what}[{dim}]", where)


def _check_numel(value: Any, expected: int, what: str, where: str) -> None:
    message = _message(f"{what} == {expected}", f"{what} != {expected}", where)
    _assert(_equal(value.numel(), expected), message, what, expected, where)


def _check_len(value: Any, expected: int, what: str, where: str) -> None:
    if isinstance(value, torch.Tensor):  # len() of a tensor is its first dimension
        _check_size(value, 0, expected, what, where)
    else:  # a list or tuple has a fixed length in an exported program
        _static(len(value), expected, what, where)


def _static(actual: Any, expected: Any, what: str, where: str) -> None:
    """A value export fixes itself (from the inputs' structure and static shapes):
    checked now, enforced afterwards by the program's own input checks."""
    if actual != expected:
        raise GuardError(_message(f"{what} == {expected!r}", f"{what} == {actual!r}", where),
                         expected=expected, actual=actual, where=where)


def _check_metadata(field: str) -> Callable[..., None]:
    def check(value: Any, expected: Any, what: str, where: str) -> None:
        _static(getattr(value, field), expected, what, where)
        # dtype and device are constants in an exported program: assert them on the tensor
        torch.ops.aten._assert_tensor_metadata.default(value, **{field: expected})

    return check


def _check_keys(value: Any, expected: tuple, what: str, where: str) -> None:
    _static(tuple(value.keys()), expected, what, where)


def _check_identity(kind: str) -> Callable[..., None]:
    def check(value: Any, expected: bool, what: str, where: str) -> None:
        actual = value is None if kind == "is_none" else isinstance(value, torch.Tensor)
        if actual is not expected:
            raise GuardError(
                _message(_guards.describe_identity(kind, what, expected),
                         _guards.describe_identity(kind, what, actual), where),
                expected=expected, actual=actual, where=where,
            )

    return check


def _check_tolist(value: Any, expected: Any, what: str, where: str) -> None:
    message = _message(f"{what} == {expected!r}", f"{what} != {expected!r}", where)
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        _assert(_equal(value, expected), message, what, expected, where)
        return
    shape = torch.tensor(expected).shape  # the traced shape (a nested list of numbers)
    for dim, size in enumerate(shape):
        if not torch.compiler.is_dynamo_compiling():  # (dynamo: a data-dependent size takes torch._check only)
            _assert(_equal(value.size(dim), size), message, what, expected, where)
        # lets export and dynamo compare with the traced values
        torch._check(value.size(dim) == size, lambda: message)  # type: ignore[no-untyped-call]
    _assert(_equal(value, expected), message, what, expected, where)


def _check_index(value: Any, expected: int, what: str, where: str) -> None:
    _number_check(lambda tensor: tensor)(value, expected, what, where)


def _check_type(value: Any, expected: str, what: str, where: str) -> None:
    # under export and compile a tensor is a FakeTensor / functional tensor: it still is a Tensor
    if isinstance(value, torch.Tensor) and expected in ("torch.Tensor", _guards.type_name(value)):
        return
    _static(_guards.type_name(value), expected, f"type({what})", where)


def _check_value(value: Any, expected: Any, what: str, where: str) -> None:
    if _is_symbolic(value):  # a Python number input export made dynamic
        _assert(_equal(value, expected), _message(f"{what} == {expected!r}", f"{what} != {expected!r}", where),
                what, expected, where)
    else:
        _static(_guards.fingerprint(value), expected, what, where)


# guard kind -> the export-/compile-native check that replaces its guard
LOWERINGS: Dict[GuardKind, Callable[..., None]] = {
    GuardKind.ITER: _check_len,
    GuardKind.UNPACK: _check_len,
    GuardKind.LEN: _check_len,
    GuardKind.BOOL: _check_truth,
    GuardKind.SHAPE: _check_shape,
    GuardKind.SIZE: _check_size,
    GuardKind.NDIM: lambda value, expected, what, where: _static(value.dim(), expected, what, where),
    GuardKind.NUMEL: _check_numel,
    GuardKind.INT: _number_check(_truncate),
    GuardKind.INDEX: _check_index,
    GuardKind.FLOAT: _number_check(lambda tensor: tensor),
    GuardKind.ITEM: _number_check(lambda tensor: tensor),
    GuardKind.TOLIST: _check_tolist,
    GuardKind.KEYS: _check_keys,
    GuardKind.DTYPE: _check_metadata("dtype"),
    GuardKind.DEVICE: _check_metadata("device"),
    GuardKind.LAYOUT: lambda value, expected, what, where: _static(str(value.layout), expected, what, where),
    GuardKind.IS_NONE: _check_identity("is_none"),
    GuardKind.IS_TENSOR: _check_identity("is_tensor"),
    GuardKind.TYPE: _check_type,
    GuardKind.VALUE: _check_value,
    # whether an input has an attribute: fixed by the input's type, which export's input spec fixes
    GuardKind.HAS_ATTR: lambda value, name, expected, what, where: _static(hasattr(value, name), expected,
                                                                        what, where),
    # grad mode is the exporting code's: fixed for the program, as torch.export fixes it
    GuardKind.GRAD_ENABLED: lambda value, expected, what, where: _static(bool(value), expected, what, where),
}

for _check in set(LOWERINGS.values()):
    has_side_effect(_check)  # dead-code elimination keeps lowered guards too

# the guard function a graph calls -> its lowering (kinds sharing a guard share a lowering)
# (a kind added without a lowering keeps its Python guard: lower_guards refuses it, and
# tests/test_export.py fails until it has one; importing specfx must not)
_BY_GUARD: Dict[Callable[..., None], Callable[..., None]] = {
    GUARDS[kind]: LOWERINGS[kind] for kind in GUARDS if kind in LOWERINGS
}


def lowered_guard(guard: Callable[..., None]) -> Optional[Callable[..., None]]:
    """The export-/compile-native check for a guard function (``None`` if it is not one).

    >>> import specfx
    >>> lowered_guard(specfx.guard_truth) is LOWERINGS[specfx.GuardKind.BOOL]
    True
    """
    return _BY_GUARD.get(guard)


_GUARD_FUNCTIONS = frozenset(GUARDS.values())


def lower_guards(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` (sharing its parameters) whose guard nodes call their lowered
    checks, ready for ``torch.export``; unused nodes are removed. Every guard node is
    lowered or this raises.

    >>> import torch, specfx
    >>> gm = specfx.trace(lambda x: x if x.sum() > 0 else -x, torch.ones(2), policy="bool")
    >>> [n.target.__name__ for n in lower_guards(gm).graph.nodes if n.op == "call_function"][-1]
    '_check_truth'
    """
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op != "call_function" or not callable(node.target):
            continue
        lowered = _BY_GUARD.get(node.target)
        if lowered is not None:
            node.target = lowered
        elif node.target in _GUARD_FUNCTIONS:  # (specfx's other graph functions run as they are)
            raise NotImplementedError(f"specfx.export has no lowering for the guard {node.target.__name__}")
    lowered_gm = torch.fx.GraphModule(gm, graph, type(gm).__name__)
    lowered_gm.graph.eliminate_dead_code()  # unused outputs (BERT's pooler) would only confuse quantizers
    lowered_gm.recompile()
    lowered_gm.meta.update(gm.meta)
    return lowered_gm


def export(
    root: Union[torch.nn.Module, Callable[..., Any]],
    example_inputs: Any = None,
    example_kwargs: Optional[Mapping[str, Any]] = None,
    *,
    policy: PolicyLike = None,
    dynamic_shapes: DynamicShapes = "auto",
    **trace_options: Any,
) -> torch.export.ExportedProgram:
    """Specialize ``root`` exactly as :func:`specfx.trace` does, then export the
    specialized graph with ``torch.export.export`` (non-strict).

    Every guard survives as a run-time check of the program (through
    ``run_decompositions``, torchao PT2E ``prepare_pt2e``/``convert_pt2e`` and
    ``ep.module()``): data decisions as ``aten._assert_async.msg`` with the specfx
    message, decisions on dynamic sizes as assertions on the symbolic size, and what
    export fixes itself (static dimensions, list lengths, the inputs' structure) by
    export's own input checks. ``dynamic_shapes="auto"`` exports every input
    dimension that no decision fixed as dynamic (``Dim.AUTO``: export keeps it
    static where the graph needs it); pass torch.export's ``dynamic_shapes`` to
    choose, or ``None`` for all static. ``trace_options`` are :func:`specfx.trace`'s
    keywords; ``guards=False`` exports no checks and warns which decisions are left
    unchecked.

    >>> import torch, specfx
    >>> def f(x):
    ...     return x * 2 if x.sum() > 0 else -x
    >>> ep = specfx.export(f, (torch.ones(2, 3),), policy=specfx.Policy(bool=True))
    >>> ep.module()(torch.ones(5, 3)).shape          # batch 5: the dims are dynamic
    torch.Size([5, 3])
    >>> ep.module()(-torch.ones(2, 3))               # the other branch: the guard fires
    Traceback (most recent call last):
    RuntimeError: specfx guard failed: the graph was specialized assuming bool(x.sum() > 0) == True, ...
    """
    args, kwargs = _call_arguments(example_inputs, example_kwargs)
    gm = trace(root, example_inputs, example_kwargs, policy=policy, **trace_options)
    specs = _auto_dynamic_shapes(gm, args, kwargs) if dynamic_shapes == "auto" else dynamic_shapes
    if not trace_options.get("guards", True):
        _warn_unchecked(gm)
    if isinstance(specs, str):
        raise ValueError(f'dynamic_shapes= takes "auto", None or torch.export\'s dynamic_shapes; got {specs!r}')
    program = torch.export.export(lower_guards(gm), args, kwargs, dynamic_shapes=specs, strict=False)
    return program


def _call_arguments(example_inputs: Any, example_kwargs: Optional[Mapping[str, Any]]) -> Tuple[tuple, dict]:
    if example_inputs is None and example_kwargs is None:
        raise TypeError("specfx.export needs example inputs: export(model, (x,), ...)")
    args = example_inputs if isinstance(example_inputs, tuple) else (
        () if example_inputs is None else (example_inputs,))
    return args, dict(example_kwargs or {})


def _fixed_dims(gm: torch.fx.GraphModule) -> Dict[str, Set[int]]:
    """Input name -> the dimensions a shape decision baked in (exported static)."""
    nodes = {node.name: node for node in gm.graph.nodes}
    placeholders = {node.name: node for node in gm.graph.nodes if node.op == "placeholder"}
    fixed: Dict[str, Set[int]] = {}
    for record in _records(gm):
        node = placeholders.get(record.node)
        if node is None or record.kind not in ("shape", "size", "numel"):
            continue
        rank = len(node.meta["tensor_meta"].shape) if "tensor_meta" in node.meta else 0
        dims = set(range(rank))
        if record.kind == "size":
            dim = _size_dim(record, nodes)
            dims = {dim % rank} if dim is not None and rank else dims
        fixed.setdefault(str(node.target), set()).update(dims)
    return fixed


def _records(gm: torch.fx.GraphModule) -> list[Specialization]:
    return list(getattr(gm, "specializations", []))


def _size_dim(record: Specialization, nodes: Mapping[str, torch.fx.Node]) -> Optional[int]:
    guard = nodes.get(record.guard) if record.guard else None
    if guard is not None:
        return int(guard.args[1])  # type: ignore[arg-type]  # (value, dim, expected, what, where)
    digits = record.expression.rpartition("(")[2].rstrip(")")  # "x.size(1)" without a guard node
    return int(digits) if digits.lstrip("-").isdigit() else None


def _auto_dynamic_shapes(gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """Every dimension of every tensor input dynamic (``Dim.AUTO``), except the ones a
    shape decision fixed; keyed by the GraphModule's parameter names."""
    fixed = _fixed_dims(gm)
    bound = inspect.signature(gm.forward).bind(*args, **kwargs)

    def spec(name: str, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            static = fixed.get(name, set())
            return {dim: Dim.AUTO for dim in range(value.dim()) if dim not in static}
        if isinstance(value, (list, tuple)):
            return type(value)(spec("", item) for item in value)
        if isinstance(value, dict):
            return {key: spec("", item) for key, item in value.items()}
        return None

    return {name: spec(name, value) for name, value in bound.arguments.items()}


def _warn_unchecked(gm: torch.fx.GraphModule) -> None:
    records = _records(gm)
    if not records:
        return
    shown = list_decisions(records, 8)
    warnings.warn(
        f"specfx.export(guards=False): {len(records)} decision(s) are baked into the program "
        f"without run-time checks; an input that breaks one gives a silently different answer "
        f"(only the dimensions export keeps static are still checked, by export itself):\n{shown}",
        SpecializationWarning,
        stacklevel=3,
    )


_guards.COMPILED.update(_BY_GUARD)  # guards reached under torch.compile lower themselves the same way
