"""The command line's calibration-set pieces: ``specfx coverage GRAPH.pt --batches
BATCHES.pt`` and ``specfx trace ... --calibration BATCHES.pt``.

A batches file is a list of batches saved with ``torch.save`` (each a tensor, a tuple or
list of positional arguments, a dict of keyword arguments, or an ``(args, kwargs)``
pair); it is read with ``weights_only=True``, so nothing in it runs.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from typing import Any, List

__all__ = ["BatchesError", "add_calibration_commands", "calibration_set", "load_batches"]


class BatchesError(Exception):
    """A batches file that cannot be read: reported as one line, exit code 2."""


def load_batches(path: str) -> List[Any]:
    """The list of batches saved in ``path`` (read without running anything)."""
    import torch

    try:
        batches = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError) as error:
        raise BatchesError(
            f"cannot read the batches in {path}: {str(error).strip().splitlines()[0]} (save a list of tensors, "
            f"tuples or dicts of tensors: torch.save([dict(batch) for batch in loader], {path!r}))") from None
    if not isinstance(batches, (list, tuple)) or not batches:
        raise BatchesError(f"{path} holds {type(batches).__name__}, not a non-empty list of batches")
    return list(batches)


def _coverage(args: argparse.Namespace) -> int:
    import torch

    from .._trace.coverage import coverage

    try:
        batches = load_batches(args.batches)
    except BatchesError as error:
        print(f"specfx coverage: {error}", file=sys.stderr)
        return 2
    try:
        gm = torch.load(args.graph, weights_only=False)
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        print(f"specfx coverage: cannot load {args.graph}: {str(error).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        with torch.no_grad():
            report = coverage(gm, batches, progress=None)
    except (TypeError, ValueError) as error:
        print(f"specfx coverage: {error}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.covered else 1


def calibration_set(args: argparse.Namespace) -> Any:
    """The ``--calibration`` batches of ``specfx trace`` (None without the option)."""
    return load_batches(args.calibration) if args.calibration else None


def add_calibration_commands(commands: Any, trace: argparse.ArgumentParser) -> None:
    """Add ``specfx coverage`` and ``specfx trace --calibration``."""
    trace.add_argument("--calibration", metavar="BATCHES.pt",
                       help="trace one graph for every batch of this file (a list saved with torch.save); "
                       "without --input/--kwarg its first batch is the example")
    report = commands.add_parser(
        "coverage", help="which batches of a calibration set a saved graph serves, guard by guard",
        description="Load a GraphModule saved with torch.save (or specfx trace --save; loading it runs the code "
        "stored in it, so use files you trust), check its guards on every batch of BATCHES.pt and print the "
        "coverage table. Exit code 0 when every batch passes, 1 when some fail.")
    report.add_argument("graph", metavar="GRAPH.pt", help="a GraphModule saved with torch.save")
    report.add_argument("--batches", required=True, metavar="BATCHES.pt",
                        help="a list of batches saved with torch.save (tensors, tuples or dicts of tensors)")
    report.set_defaults(run=_coverage)
