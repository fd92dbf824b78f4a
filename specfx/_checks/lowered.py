"""The export-native forms of the guards: what ``torch.export``, PT2E quantization and
``torch.compile`` keep as part of a program.

A specfx guard is a Python function: under ``torch.export`` it would run once on fake values
(``bool()`` of a data-dependent value fails there, a length check passes and leaves nothing),
and under ``torch.compile`` it breaks the graph. Lowered, each guard kind becomes:

- a value read from tensor data (``bool``, ``int``, ``float``, ``item``, ``tolist``...):
  ``aten._assert_async.msg(condition, message)`` on the tensor, with specfx's message (the
  assumption and the user's source line);
- a value that depends on a dynamic dimension (a shape predicate, ``x.size(0)``): the same
  assertion on the symbolic size (``sym_size`` -> ``scalar_tensor`` -> assert);
- ``dtype`` and ``device``: ``aten._assert_tensor_metadata``;
- a value export itself fixes (a dimension it specialized, the length of a list, a dict's
  keys, an argument that is ``None``): checked once while exporting, then enforced by export's
  own input checks (its input spec and shape guards).

:data:`LOWERINGS` is keyed on the guard kinds; :mod:`specfx.guards` maps each guard function
to its lowering (``COMPILED``), which a guard reached under ``torch.compile`` runs instead of
itself, and ``specfx.export`` rewrites guard nodes with it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch.fx.node import has_side_effect

from .._policy.messages import describe_identity, exported_guard_failure
from ..errors import GuardError
from .kinds import GuardKind, fingerprint, same_value, type_name

__all__ = ["LOWERINGS", "one_line"]


def one_line(message: str) -> str:
    """The message as Inductor can embed it in a C++ string literal (it escapes nothing)."""
    return message.replace("\\", "/").replace('"', "'").replace("\n", " ")


_one_line = one_line


def _is_symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymBool, torch.SymInt, torch.SymFloat))


def _assert(condition: Any, message: str, what: str, expected: Any, where: str) -> Optional[torch.Tensor]:
    """Emit ``condition`` as a run-time assertion: a tensor or a symbolic bool becomes
    ``aten._assert_async.msg``; a plain bool is known while exporting and checked now. Returns
    the asserted tensor (None when checked now), which ``specfx.guarded`` puts in the data flow
    of an exported program (``specfx/_graph/guard_flow.py``)."""
    if isinstance(condition, torch.Tensor):
        holds = condition.all()
        torch.ops.aten._assert_async.msg(holds, _one_line(message))
        return holds
    elif isinstance(condition, bool) or torch.compiler.is_dynamo_compiling():
        # known now; under dynamo a condition on sizes becomes a guard of the compiled code
        # (an input that breaks it recompiles, and this raises while compiling)
        if not condition:
            raise GuardError(message, expected=expected, actual="<other>", where=where)
        return None
    # export: scalar_tensor keeps the size symbolic (no guard on it), so it is checked per call
    holds = torch.ops.aten.scalar_tensor.default(condition)
    torch.ops.aten._assert_async.msg(holds, _one_line(message))
    return holds


def _both(first: Optional[torch.Tensor], second: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Two asserted conditions as one (either may be None: checked while exporting)."""
    if first is None or second is None:
        return second if first is None else first
    return torch.logical_and(first.bool(), second.bool())


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


def _check_truth(value: Any, expected: bool, what: str, where: str) -> Optional[torch.Tensor]:
    message = exported_guard_failure(f"{what} == {expected}", f"{what} == {not expected}", where)
    if isinstance(value, torch.Tensor):
        condition: Any = value.bool() if expected else value.logical_not()
    elif isinstance(value, bool) or torch.compiler.is_dynamo_compiling():
        condition = bool(value) is expected
    else:  # a symbolic bool or number: as a tensor, without guarding on it
        number = torch.ops.aten.scalar_tensor.default(value)
        condition = number != 0 if expected else number == 0
    return _assert(condition, message, what, expected, where)


def _number_check(convert: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Optional[torch.Tensor]]:
    """A check that ``convert(value)`` (``int()``, ``float()``, ``.item()``...) is the traced value."""

    def check(value: Any, expected: Any, what: str, where: str) -> Optional[torch.Tensor]:
        message = exported_guard_failure(f"{what} == {expected!r}", f"{what} != {expected!r}", where)
        if isinstance(value, torch.Tensor):
            return _assert(_equal(convert(value), expected), message, what, expected, where)
        return _assert(_equal(value, expected), message, what, expected, where)

    return check


def _python_type(dtype: torch.dtype) -> type:
    """The type of the Python number ``.item()`` gives for a tensor of ``dtype``."""
    if dtype is torch.bool:
        return bool
    if dtype.is_complex:
        return complex
    return float if dtype.is_floating_point else int


def _typed(check: Callable[..., Optional[torch.Tensor]]) -> Callable[..., Optional[torch.Tensor]]:
    """``check``, after checking that the tensor gives Python numbers of the traced type:
    ``.item()`` and ``.tolist()`` answer an int, a float or a bool as the dtype says, and the
    traced value is baked in with its type (``x * x.sum().item()`` traced on float64 gives
    floats for an int64 input, where eager gives ints). Export and dynamo fix dtypes while
    tracing, so the type is checked then (dynamo re-traces on another dtype), and the
    exported program asserts the dtype on each call (``aten._assert_tensor_metadata``)."""

    def typed(value: Any, expected: Any, what: str, where: str) -> Optional[torch.Tensor]:
        if isinstance(value, torch.Tensor):
            number = expected
            while isinstance(number, list) and number:
                number = number[0]
            traced, actual = type(number).__name__, _python_type(value.dtype).__name__
            if not isinstance(number, list) and actual != traced:
                raise GuardError(exported_guard_failure(f"type({what}) is {traced}", f"type({what}) is {actual}",
                                                        where), expected=traced, actual=actual, where=where)
            torch.ops.aten._assert_tensor_metadata.default(value, dtype=value.dtype)
        return check(value, expected, what, where)

    typed.__name__ = check.__name__
    return typed


def _truncate(value: torch.Tensor) -> torch.Tensor:
    return torch.trunc(value) if value.is_floating_point() else value  # int() rounds toward zero


def _check_size(value: Any, dim: int, expected: int, what: str, where: str) -> Optional[torch.Tensor]:
    message = exported_guard_failure(f"{what} == {expected}", f"{what} != {expected}", where)
    return _assert(_equal(value.size(dim), expected), message, what, expected, where)


def _check_shape(value: Any, expected: Tuple[int, ...], what: str, where: str) -> Optional[torch.Tensor]:
    if value.dim() != len(expected):
        _static(value.dim(), len(expected), f"{what} (its length)", where)
    holds = None
    for dim, size in enumerate(expected):
        holds = _both(holds, _check_size(value, dim, size, f"{what}[{dim}]", where))
    return holds


def _check_numel(value: Any, expected: int, what: str, where: str) -> Optional[torch.Tensor]:
    message = exported_guard_failure(f"{what} == {expected}", f"{what} != {expected}", where)
    return _assert(_equal(value.numel(), expected), message, what, expected, where)


def _check_len(value: Any, expected: int, what: str, where: str) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):  # len() of a tensor is its first dimension
        return _check_size(value, 0, expected, what, where)
    # a list or tuple has a fixed length in an exported program
    _static(len(value), expected, what, where)
    return None


def _static(actual: Any, expected: Any, what: str, where: str) -> None:
    """A value export fixes itself (from the inputs' structure and static shapes):
    checked now, enforced afterwards by the program's own input checks. Compared as the
    guards compare (:func:`same_value`): the same number of another type is another value."""
    if not same_value(actual, expected):
        raise GuardError(exported_guard_failure(f"{what} == {expected!r}", f"{what} == {actual!r}", where),
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
                exported_guard_failure(describe_identity(kind, what, expected),
                         describe_identity(kind, what, actual), where),
                expected=expected, actual=actual, where=where,
            )

    return check


def _check_tolist(value: Any, expected: Any, what: str, where: str) -> Optional[torch.Tensor]:
    message = exported_guard_failure(f"{what} == {expected!r}", f"{what} != {expected!r}", where)
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return _assert(_equal(value, expected), message, what, expected, where)
    shape = torch.tensor(expected).shape  # the traced shape (a nested list of numbers)
    holds = None
    for dim, size in enumerate(shape):
        if not torch.compiler.is_dynamo_compiling():  # (dynamo: a data-dependent size takes torch._check only)
            holds = _both(holds, _assert(_equal(value.size(dim), size), message, what, expected, where))
        # lets export and dynamo compare with the traced values
        torch._check(value.size(dim) == size, lambda: message)  # type: ignore[no-untyped-call]
    return _both(holds, _assert(_equal(value, expected), message, what, expected, where))


def _check_index(value: Any, expected: int, what: str, where: str) -> Optional[torch.Tensor]:
    return _number_check(lambda tensor: tensor)(value, expected, what, where)


def _check_type(value: Any, expected: str, what: str, where: str) -> None:
    # dynamo knows (and guards) the Python type of a tensor input: an nn.Parameter or a subclass
    # recompiles, and this fails while compiling. Under export a tensor is a FakeTensor / functional
    # tensor, whose type says nothing: integrations/export.py asks the type per call (specfx::check).
    if (isinstance(value, torch.Tensor) and not torch.compiler.is_dynamo_compiling()
            and expected in ("torch.Tensor", type_name(value))):
        return
    _static(type_name(value), expected, f"type({what})", where)


def _check_value(value: Any, expected: Any, what: str, where: str) -> Optional[torch.Tensor]:
    if _is_symbolic(value):  # a Python number input export made dynamic
        return _assert(_equal(value, expected), exported_guard_failure(f"{what} == {expected!r}", f"{what} != {expected!r}", where),
                what, expected, where)
    _static(fingerprint(value), expected, what, where)
    return None


# guard kind -> the export-/compile-native check that replaces its guard
LOWERINGS: Dict[GuardKind, Callable[..., Optional[torch.Tensor]]] = {
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
    GuardKind.ITEM: _typed(_number_check(lambda tensor: tensor)),
    GuardKind.TOLIST: _typed(_check_tolist),
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
