"""``check_inputs``: the graph must return exactly what eager returns.

Each check input runs through the eager model and through the graph, each on
private copies of the model's tensors (shadow modules), drawing random numbers
from private generators that start from the same states (torch's global RNG and
the model's generators are never advanced). The outputs must have the same structure, and each tensor the same
dtype, shape, ``requires_grad``, aliasing (which outputs share memory with an
input or with each other) and values bit for bit (NaNs where NaNs are, the sign
of zeros): the graph runs the same kernels. ``check_tolerance=(rtol, atol)``
allows a difference in values where the user knows kernels differ.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils import _pytree as pytree

from .._capture.evaluation import PrivateDraws
from .._capture.state import PrivateGenerators, TraceState, clone_example, preserved_state
from .._capture.tracer import TRACE_LOCK
from ..errors import GuardError, TraceCheckError
from .._policy.messages import check_eager_raised, check_guard_failed, check_outputs_differ

__all__ = ["check", "compare_outputs"]


def _as_call(entry: Any) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    if isinstance(entry, tuple):
        return entry, {}
    if isinstance(entry, dict):
        return (), dict(entry)
    return (entry,), {}


def _check_tolerance(tolerance: Any) -> Optional[Tuple[float, float]]:
    if tolerance is None:
        return None
    if (isinstance(tolerance, tuple) and len(tolerance) == 2
            and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in tolerance)):
        return float(tolerance[0]), float(tolerance[1])
    raise TypeError(f"check_tolerance= takes (rtol, atol), two non-negative numbers; got {tolerance!r}")


def check(gm: torch.fx.GraphModule, root: Any, check_inputs: Sequence[Any], tolerance: Any = None,
          concrete_args: Optional[Dict[str, Any]] = None) -> None:
    """Run eager and traced on each input; raise :class:`TraceCheckError` on a
    guard failure or a differing output, naming the input's index. The eager model
    is also given ``concrete_args``, which the graph has baked in."""
    if isinstance(check_inputs, (torch.Tensor, dict)) or not isinstance(check_inputs, Sequence):
        raise TypeError("check_inputs= takes a list of inputs, e.g. [(x1,), (x2,)]")
    tolerance = _check_tolerance(tolerance)
    for index, entry in enumerate(check_inputs):
        args, kwargs = _as_call(entry)
        eager_inputs = clone_example((args, {**kwargs, **(concrete_args or {})}))
        graph_inputs = clone_example((args, kwargs))
        # Both runs act on private copies of the model's tensors (shadow modules): the user's
        # model is not written, and both start from the same state.
        # Both draw random numbers from private generators starting from the same states:
        # torch's RNG and the model's generators are neither advanced nor rewound.
        draws = PrivateGenerators()
        with TRACE_LOCK, preserved_state(root):
            eager = TraceState().module(root, copy_parameters=True) if isinstance(root, torch.nn.Module) else root
            graph = TraceState().module(gm, copy_parameters=True)
            try:
                with PrivateDraws(draws.generator):
                    expected = eager(*eager_inputs[0], **eager_inputs[1])
            except Exception as error:
                raise TraceCheckError(check_eager_raised(index, error), index=index) from error
            try:
                with PrivateDraws(draws.fork().generator):
                    actual = graph(*graph_inputs[0], **graph_inputs[1])
            except GuardError as error:
                raise TraceCheckError(check_guard_failed(index, error), index=index) from error
        problem = compare_outputs(expected, actual, tolerance) or _compare_aliasing(
            eager_inputs, expected, graph_inputs, actual)
        if problem:
            raise TraceCheckError(check_outputs_differ(index, problem), index=index)


def _same_bits(want: torch.Tensor, got: torch.Tensor) -> bool:
    if torch.equal(want, got):
        return not (want.is_floating_point() and not torch.equal(torch.signbit(want), torch.signbit(got)))
    if not (want.is_floating_point() or want.is_complex()):
        return False
    nan = torch.isnan(want)
    return (torch.equal(nan, torch.isnan(got)) and torch.equal(want[~nan], got[~nan])
            and (want.is_complex() or torch.equal(torch.signbit(want), torch.signbit(got))))


def compare_outputs(expected: Any, actual: Any, tolerance: Optional[Tuple[float, float]] = None) -> Optional[str]:
    """A description of the first difference between two outputs, or None: values
    bit for bit unless ``tolerance=(rtol, atol)``; dtype, shape and requires_grad always."""
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    if expected_spec != actual_spec:
        return f"structure {actual_spec} instead of {expected_spec}"
    for position, (want, got) in enumerate(zip(expected_leaves, actual_leaves)):
        if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
            if want.shape != got.shape or want.dtype != got.dtype:
                return (f"output leaf {position}: shape/dtype {tuple(got.shape)}/{got.dtype} "
                        f"instead of {tuple(want.shape)}/{want.dtype}")
            if want.requires_grad != got.requires_grad:
                return f"output leaf {position}: requires_grad={got.requires_grad} instead of {want.requires_grad}"
            if tolerance is None:
                if not _same_bits(want.detach(), got.detach()):
                    worst = (got.detach().double() - want.detach().double()).abs().nan_to_num(float("inf")).max()
                    return (f"output leaf {position}: values differ (largest difference {float(worst):.3g}); "
                            f"pass check_tolerance=(rtol, atol) if the graph is expected to run other kernels")
            else:
                try:
                    torch.testing.assert_close(got, want, rtol=tolerance[0], atol=tolerance[1], equal_nan=True)
                except AssertionError as error:
                    return f"output leaf {position}: {str(error).strip().splitlines()[0]}"
        elif type(want) is not type(got) or want != got:
            return f"output leaf {position}: {got!r} instead of {want!r}"
    return None


def _alias_pattern(inputs: Any, output: Any) -> List[Optional[str]]:
    """For each output tensor: which input (or earlier output) shares its memory, if any."""
    owners: Dict[int, str] = {}
    for position, leaf in enumerate(pytree.tree_leaves(inputs)):
        if isinstance(leaf, torch.Tensor) and leaf.layout is torch.strided and leaf.device.type != "meta":
            owners.setdefault(leaf.untyped_storage().data_ptr(), f"input leaf {position}")
    pattern: List[Optional[str]] = []
    for position, leaf in enumerate(pytree.tree_leaves(output)):
        if not (isinstance(leaf, torch.Tensor) and leaf.layout is torch.strided and leaf.device.type != "meta"):
            pattern.append(None)
            continue
        key = leaf.untyped_storage().data_ptr()
        pattern.append(owners.get(key) if key else None)
        if key:
            owners.setdefault(key, f"output leaf {position}")
    return pattern


def _compare_aliasing(eager_inputs: Any, expected: Any, graph_inputs: Any, actual: Any) -> Optional[str]:
    want, got = _alias_pattern(eager_inputs, expected), _alias_pattern(graph_inputs, actual)
    for position, (a, b) in enumerate(zip(want, got)):
        if a != b:
            return (f"output leaf {position} shares memory with {b or 'nothing'} in the graph, "
                    f"with {a or 'nothing'} in eager")
    return None
