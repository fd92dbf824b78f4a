"""``trace(model, calibration=batches)``: one graph that serves a whole calibration set.

1. Trace on the example (the first batch when no example is given), as ``trace``
   always does, and check the graph's guards on every batch (:class:`GuardChecker`).
   When all hold, that graph is the answer: a set whose batches all take the
   example's path gets exactly the plain trace.
2. When a guard on a shape read failed (under ``SHAPES``, ``x.shape`` and
   ``x.size(d)`` are read as ints and guarded where they are read), trace again with
   shape reads kept symbolic: a size then becomes an int only where the code needs
   one (``range(n)``, ``int(n)``, a branch on it), and that is the decision guarded;
   a size that only flows into ops (``x.view(b * s, d)``, ``torch.zeros(b, s)``)
   stays a node of the graph. Check every batch again.
3. A guard that still fails is a decision that really differs between batches:
   refuse with ``SpecializationError`` naming the first such batch, the decision,
   the example's value and the batch's, and the way out (``Specializer.fit``).

The set is read once per check (twice at most); a one-shot iterator is read into a
list first.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import torch

from .._capture.demands import deferred_shapes
from .._policy.messages import calibration_path_differs, calibration_sizes_not_symbolic, calibration_structure_differs
from .._policy.policy import Specialize
from ..errors import SpecializationError
from ..guards import GuardKind
from .coverage import Coverage, GuardChecker, GuardCoverage, as_call
from .progress import check_progress, progress_bar

__all__ = ["trace_calibrated"]

# the kinds of guard a shape read under SHAPES emits (ndim is read as an int still: it never varies by batch)
_SHAPE_READS = frozenset({GuardKind.SHAPE, GuardKind.SIZE, GuardKind.NUMEL})


def _batches(calibration: Any) -> Iterable[Any]:
    if isinstance(calibration, (torch.Tensor, Mapping)) or not isinstance(calibration, Iterable):
        raise TypeError(f"calibration= takes an iterable of batches (a DataLoader, a list); "
                        f"got {type(calibration).__name__}")
    if iter(calibration) is calibration:  # a one-shot iterator: it is read more than once
        return list(calibration)
    return calibration


def _check(gm: torch.fx.GraphModule, batches: Iterable[Any], progress: Optional[bool]) -> Coverage:
    checker = GuardChecker(gm)
    for index, batch in enumerate(progress_bar(batches, progress, "calibration check")):
        checker.check(index, *as_call(batch))
    return checker.report()


def _shape_read_failed(report: Coverage) -> bool:
    return any(row.failed and row.specialization is not None and row.specialization.kind in _SHAPE_READS
               and row.specialization.flag is Specialize.SHAPES for row in report.guards)


def trace_calibrated(
    trace: Callable[..., torch.fx.GraphModule], root: Any, example_inputs: Any,
    example_kwargs: Optional[Mapping[str, Any]], calibration: Any, progress: Optional[bool], **options: Any,
) -> torch.fx.GraphModule:
    """``trace(root, example_inputs, example_kwargs, **options)`` made to serve every
    batch of ``calibration`` (see the module docstring)."""
    progress = check_progress(progress)
    if options.get("guards") is False:
        raise ValueError("calibration= needs guards: they are how the graph is checked against every batch "
                         "(trace with guards=True, the default)")
    batches = _batches(calibration)
    given = example_inputs is not None or example_kwargs is not None
    if not given:
        for first in batches:
            example_inputs, example_kwargs = as_call(first)
            break
        else:
            raise ValueError("calibration= is empty: give at least one batch (or example inputs)")
    gm = trace(root, example_inputs, example_kwargs, **options)
    report = _check(gm, batches, progress)
    if report.covered:
        return gm
    if _shape_read_failed(report):
        try:
            with deferred_shapes():
                deferred = trace(root, example_inputs, example_kwargs, **options)
        except Exception as error:  # code that needs its sizes as ints after all: the sizes differ
            raise _not_symbolic(report, given, error) from error
        report = _check(deferred, batches, progress)
        if report.covered:
            return deferred
    raise _differing(report, given)


def _not_symbolic(report: Coverage, given: bool, error: Exception) -> SpecializationError:
    """The refusal when sizes differ and the trace with symbolic shape reads failed."""
    row = min((r for r in report.guards if r.first_failure is not None and r.specialization is not None
               and r.specialization.kind in _SHAPE_READS), key=lambda r: r.first_failure or 0)
    record = row.specialization
    assert record is not None and row.first_failure is not None
    return SpecializationError(
        calibration_sizes_not_symbolic(row.first_failure, report.failed_batches, given, row.assumption, row.seen,
                                       f"{record.where}: {record.source}", error),
        operation=row.assumption, flag=record.flag, value=row.value_seen, location=record.where,
        batch=row.first_failure)


def _differing(report: Coverage, given: bool) -> SpecializationError:
    """The refusal for the first batch the graph does not serve."""
    failed = [row for row in report.guards if row.first_failure is not None]
    row: GuardCoverage = min(failed, key=lambda r: r.first_failure if r.first_failure is not None else -1)
    index = row.first_failure if row.first_failure is not None else -1
    failing = report.failed_batches
    record = row.specialization
    if record is None:
        return SpecializationError(calibration_structure_differs(index, failing, given, row.seen),
                                   operation="calibration", value=row.value_seen, batch=index)
    return SpecializationError(
        calibration_path_differs(index, failing, given, row.assumption, row.seen, f"{record.where}: {record.source}"),
        operation=row.assumption, flag=record.flag, value=row.value_seen, location=record.where, batch=index)
