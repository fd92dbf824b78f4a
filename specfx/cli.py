"""``python -m specfx`` / ``specfx``: the command-line interface.

>>> main(["--help"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
SystemExit: 0
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from . import _demo

    _demo.run()
    return 0


def _explain(args: argparse.Namespace) -> int:
    import torch

    from ._report import explain

    try:
        gm = torch.load(args.file, weights_only=False)
    except (OSError, RuntimeError) as error:
        print(f"specfx explain: cannot load {args.file}: {error}", file=sys.stderr)
        return 2
    try:
        print(explain(gm))
    except TypeError as error:
        print(f"specfx explain: {error}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one sub-command per job)."""
    parser = argparse.ArgumentParser(
        prog="specfx",
        description="A value-carrying torch.fx tracer: every baked-in decision is recorded, "
        "explained and guarded.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="trace two models plain FX cannot and show the results")
    demo.set_defaults(run=_demo)
    report = commands.add_parser("explain", help="print the specializations of a saved GraphModule")
    report.add_argument("file", help="a GraphModule saved with torch.save(gm, FILE)")
    report.set_defaults(run=_explain)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.run(args))
