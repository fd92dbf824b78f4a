"""The command line's calibration-set pieces: ``specfx coverage GRAPH.pt --batches
BATCHES.pt`` and ``specfx trace ... --calibration BATCHES.pt``.

A batches file is a list of batches saved with ``torch.save`` (each a tensor, a tuple or
list of positional arguments, a dict of keyword arguments, or an ``(args, kwargs)``
pair); it is read with ``weights_only=True``, so nothing in it runs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import zipfile
from typing import Any, List

__all__ = ["BatchesError", "add_calibration_commands", "calibration_set", "load_batches", "unreadable"]


class BatchesError(Exception):
    """A batches file that cannot be read: reported as one line, exit code 2."""


def load_batches(path: str) -> List[Any]:
    """The list of batches saved in ``path`` (read without running anything)."""
    import torch

    try:
        batches = torch.load(path, weights_only=True)
    except Exception as error:  # (torch's weights-only reader raises KeyError & co. on a file it did not write)
        raise BatchesError(
            f"cannot read the batches in {path}: {unreadable(path, error)} (save a list of tensors, "
            f"tuples or dicts of tensors: torch.save([dict(batch) for batch in loader], {path!r}))") from None
    if not isinstance(batches, (list, tuple)) or not batches:
        raise BatchesError(f"{path} holds {type(batches).__name__}, not a non-empty list of batches")
    return list(batches)


def unreadable(path: str, error: BaseException) -> str:
    """Why ``torch.load`` could not read ``path``, in a few words: a saved graph where tensors
    were expected, not a file torch.save wrote, or torch's first line."""
    text = str(error)
    unsupported = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if unsupported is not None:
        name = unsupported.group(1)
        if name.startswith(("specfx.", "torch.fx.")):
            return (f"it holds a saved graph (a GraphModule, which names {name}), not tensors; a file of batches "
                    f"holds tensors only")
        return f"it holds a {name} object, not tensors; a file of batches holds tensors only"
    if os.path.isfile(path) and not zipfile.is_zipfile(path):
        with open(path, "rb") as handle:
            if handle.read(2) != b"\x80\x02":  # (torch.save's legacy format starts with pickle protocol 2)
                return "it is not a file torch.save wrote"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(error).__name__}: {first}" if isinstance(error, (KeyError, ValueError, TypeError)) else first


def _coverage(args: argparse.Namespace) -> int:
    import torch

    from .._trace.coverage import coverage

    try:
        batches = load_batches(args.batches)
    except BatchesError as error:
        print(f"specfx coverage: {error}", file=sys.stderr)
        return 2
    from .imports import current_directory_importable, quiet_import_noise

    try:
        # (unpickling imports the model's modules: from the current directory too, as python -m does)
        with quiet_import_noise(), current_directory_importable():
            gm = torch.load(args.graph, weights_only=False)
    except Exception as error:
        print(f"specfx coverage: cannot load {args.graph}: {unreadable(args.graph, error)}", file=sys.stderr)
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
