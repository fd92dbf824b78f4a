"""Run-time reads of what an exported program cannot see in its own data: a tensor's
metadata (contiguity, strides, layout, dtype, ``requires_grad``), its Python type and
attributes, and the calling thread's grad and autocast modes.

torch.export traces with FakeTensors under its own grad mode: ``x.is_contiguous()``,
``type(x)`` or ``torch.is_grad_enabled()`` are answered once, while exporting, and the
exported program never asks again. ``specfx::check(x, read, expected, what, where)`` is a
custom operator that asks on every call: it raises specfx's :class:`~specfx.GuardError`
(the assumption, this input's value, the user's line) unless ``read`` of ``x`` renders as
``expected``, and returns a true 0-dim tensor, which exported programs assert
(``aten._assert_async.msg``) so that export, ``run_decompositions``, PT2E quantization and
``ep.module()`` keep the call. ``x`` is the tensor the decision read, or the program's
first tensor input for the modes (which read no tensor).

>>> import torch
>>> torch.ops.specfx.check(torch.ones(2, 3), "is_contiguous", "True", "x.is_contiguous()", "m.py:3")
tensor(True)
>>> read_of(torch.ones(2, 3).t(), "stride|0"), read_of(torch.ones(2), "type")
(1, 'torch.Tensor')
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

from .._policy.messages import guard_failure
from ..errors import GuardError
from .kinds import type_name

__all__ = ["READABLE_ATTRIBUTES", "READABLE_METHODS", "check", "read_of", "render"]

# tensor methods and attributes that read metadata only (no data, no sizes export keeps symbolic)
READABLE_METHODS = frozenset({"is_contiguous", "stride", "is_floating_point", "is_complex", "is_signed",
                              "element_size"})
READABLE_ATTRIBUTES = frozenset({"requires_grad", "is_sparse", "is_quantized", "is_leaf", "layout", "dtype",
                                 "is_nested", "is_mkldnn"})


def render(value: Any) -> str:
    """The text :func:`check` compares (``True``, ``(3, 1)``, ``torch.float32``, ``torch.strided``)."""
    return str(value)


def _argument(text: str) -> Any:
    if text.lstrip("-").isdigit():
        return int(text)
    memory_format = getattr(torch, text, None)  # channels_last, contiguous_format...
    if isinstance(memory_format, torch.memory_format):
        return memory_format
    raise ValueError(f"specfx::check cannot read the argument {text!r}")


# read -> what it reads of the tensor (the text after ':' is its argument)
_READS: Dict[str, Callable[[torch.Tensor, str], Any]] = {
    "type": lambda x, _: type_name(x),
    "hasattr": lambda x, name: hasattr(x, name),
    "attr": lambda x, name: getattr(x, name) if name in READABLE_ATTRIBUTES else None,
    "grad_enabled": lambda x, _: torch.is_grad_enabled(),  # (a kernel sees its caller's grad mode)
    "autocast": lambda x, device: torch.is_autocast_enabled(device),
}


def read_of(x: torch.Tensor, read: str) -> Any:
    """What ``read`` reads of ``x``: ``"type"``, ``"hasattr:name"``, ``"attr:requires_grad"``,
    ``"grad_enabled"``, ``"autocast:cpu"``, or a metadata method called with its arguments,
    ``"stride|0"``, ``"is_contiguous|memory_format=channels_last"``."""
    kind, _, argument = read.partition(":")
    if kind in _READS:
        return _READS[kind](x, argument)
    method, *arguments = read.split("|")
    if method not in READABLE_METHODS:
        raise ValueError(f"specfx::check: {method!r} is not a metadata read")
    args = [_argument(a) for a in arguments if "=" not in a]
    kwargs = {k: _argument(v) for k, v in (a.split("=", 1) for a in arguments if "=" in a)}
    return getattr(x, method)(*args, **kwargs)


@torch.library.custom_op("specfx::check", mutates_args=())
def check(x: torch.Tensor, read: str, expected: str, what: str, where: str) -> torch.Tensor:
    """Raise :class:`~specfx.GuardError` unless ``read`` of ``x`` renders as ``expected``."""
    actual = render(read_of(x, read))
    if actual != expected:
        spelled = "type({}) is {}" if read == "type" else "{} == {}"
        raise GuardError(
            guard_failure(what, expected, actual, where, claim=spelled.format(what, expected),
                          observed=spelled.format(what, actual)),
            expression=what, expected=expected, actual=actual, location=where,
        )
    return torch.ones((), dtype=torch.bool)


@check.register_fake
def _(x: torch.Tensor, read: str, expected: str, what: str, where: str) -> torch.Tensor:
    return torch.empty((), dtype=torch.bool)
