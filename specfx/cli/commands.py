"""``python -m specfx`` / ``specfx``: the command-line interface.

Reading the command line imports nothing heavy: ``--help`` and a bad argument answer at
once, before torch is imported or the model is built. Every failure is one line on
stderr and a non-zero exit code (2: the command line; 1: the trace), a refusal included
(specfx's explanation on one line, its fix spelled as options); ``--traceback`` shows
Python's traceback instead.

>>> main(["--help"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
SystemExit: 0
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Optional, Sequence

from .calibration import add_calibration_commands
from .inputs import UsageError, parse_input

__all__ = ["build_parser", "main", "parse_input"]

EXAMPLES = """\
examples:
  specfx demo
  specfx trace torchvision.models:resnet18 --input 'randn(1, 3, 224, 224)' --check 3
  specfx trace mypkg.models:build_detector --input 'randn(2, 3, 512, 512)' --policy iter,bool \\
      --check-input 'randn(4, 3, 640, 480)' --out detector_graph.py --save detector.pt
  specfx trace mypkg.ops:fused_op --function --input 'randn(4, 8)' --kwarg 'scale=0.5'
  specfx trace mypkg.models:tiny_bert --kwarg 'input_ids=randint(0, 100, (2, 8))' \\
      --kwarg 'attention_mask=ones(2, 8, dtype=int64)' --concrete-arg use_cache=False \\
      --policy bool --scope 'encoder.layer.*=iter' --leaf pooler --check 3
  specfx explain detector.pt

Values (--input, --kwarg, --concrete-arg, --check-input): a torch factory call (randn, rand,
zeros, ones, empty, full, arange, randint, tensor) with literal arguments and dtype=/device=
keywords, e.g. 'ones(2, 8, dtype=float16)' or 'randn(1, 4, device="meta")', or a Python
literal (3, 0.5, True, None, [1, 2]).
MODULE is imported from the current directory first, as `python -m` does.
"""


def _trace(args: argparse.Namespace) -> int:
    from .trace_command import run

    return run(args)


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.run()
    return 0


def _explain(args: argparse.Namespace) -> int:
    from .._graph.report import explain
    from .._graph.safe_load import UnsafeFileError, read_specializations

    try:
        if args.unsafe_load:
            import torch

            from .imports import current_directory_importable, quiet_import_noise

            # (unpickling imports the model's modules: from the current directory too, as python -m does)
            with quiet_import_noise(), current_directory_importable():
                saved: Any = torch.load(args.file, weights_only=False)
        else:
            saved = read_specializations(args.file)
    except UnsafeFileError as error:
        print(f"specfx explain: {error}; if you trust the file, pass --unsafe-load (loading a pickled "
              f"GraphModule runs the code stored in it)", file=sys.stderr)
        return 2
    except Exception as error:  # (whatever unpickling a foreign file raises: one line)
        from .calibration import unreadable

        print(f"specfx explain: cannot load {args.file}: {unreadable(args.file, error)}", file=sys.stderr)
        return 2
    try:
        print(explain(saved))
    except TypeError as error:
        print(f"specfx explain: {error}", file=sys.stderr)
        return 2
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (argparse prints the usage block first),
    naming the command and where the options are listed."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (`{self.prog} --help` lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (one sub-command per job)."""
    parser = _Parser(
        prog="specfx",
        description="A value-carrying torch.fx tracer: every baked-in decision is recorded, "
        "explained and guarded.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="trace two models plain FX cannot and show the results")
    demo.set_defaults(run=_demo)
    trace = commands.add_parser(
        "trace", help="trace a model built by an importable factory", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a model with MODULE:FACTORY(), trace it with example inputs, print the "
        "generated code and the table of specializations.",
    )
    trace.add_argument("model", metavar="MODULE:FACTORY",
                       help="an nn.Module subclass or a function returning an nn.Module (a dotted path "
                       "after the colon reaches into the module: pkg.models:Zoo.tiny)")
    trace.add_argument("--input", action="append", default=[], metavar="EXPR",
                       help="a positional example input (repeat for more), e.g. 'randn(1, 3, 224, 224)'")
    trace.add_argument("--kwarg", action="append", default=[], metavar="NAME=EXPR",
                       help="a keyword example input (repeat for more), e.g. 'attention_mask=ones(1, 128, "
                       "dtype=int64)'; it stays an input of the graph")
    trace.add_argument("--concrete-arg", action="append", default=[], metavar="NAME=VALUE",
                       help="bake a Python argument into the graph (torch.fx's concrete_args), e.g. "
                       "use_cache=False; the graph checks that calls pass the same value")
    trace.add_argument("--policy", default=None, metavar="FLAGS",
                       help="what may be specialized, for the whole model: comma-separated iter, bool, shapes, "
                       "scalars (or ALL)")
    trace.add_argument("--scope", action="append", default=[], metavar="GLOB=FLAGS",
                       help="grant FLAGS only in the submodules whose qualified names match GLOB "
                       "(repeatable), e.g. 'encoder.layer.*=iter'")
    trace.add_argument("--leaf", action="append", default=[], metavar="QUALNAME|CLASS",
                       help="keep a submodule out of the trace, called as a whole (repeatable): a qualified "
                       "name such as encoder.pooler, or a class such as torch.nn.MultiheadAttention or "
                       "mypkg.blocks:Attention")
    trace.add_argument("--eval", action="store_true",
                       help="put the model in eval mode before tracing (models built from a config start in "
                       "training mode: dropout active, batch statistics)")
    trace.add_argument("--function", action="store_true", help="trace the callable itself, not what it returns")
    trace.add_argument("--check", type=int, default=0, metavar="N",
                       help="also run N random inputs of the same shapes through eager and traced")
    trace.add_argument("--check-input", action="append", default=[], metavar="ARGS",
                       help="also run eager and traced on these call arguments (repeatable), e.g. other batch "
                       "sizes or lengths: 'randn(8, 3, 224, 224)' or 'input_ids=randint(0, 100, (4, 32))'")
    trace.add_argument("--out", metavar="FILE.py", help="write the generated code to this file")
    trace.add_argument("--save", metavar="FILE.pt", help="torch.save the GraphModule to this file "
                       "(load it with torch.load(FILE, weights_only=False), for files you trust)")
    trace.add_argument("--no-guards", action="store_true", help="emit no guards (unsafe; for inspection)")
    trace.add_argument("--traceback", action="store_true",
                       help="on a failure, show Python's full traceback instead of one line")
    trace.set_defaults(run=_trace)
    report = commands.add_parser("explain", help="print the specializations of a saved GraphModule")
    report.add_argument("file", help="a GraphModule saved with torch.save(gm, FILE) or specfx trace --save "
                        "(or its records: torch.save(specfx.specializations(gm), FILE))")
    report.add_argument("--unsafe-load", action="store_true",
                        help="load FILE with torch.load(weights_only=False) instead of only reading its records: "
                        "this runs any code the file contains, so use it only on files you trust; needed for "
                        "graphs that lost their records (explained from their guard nodes)")
    report.set_defaults(run=_explain)
    add_calibration_commands(commands, trace)
    return parser


def _did_you_mean(parser: argparse.ArgumentParser, command: Optional[str], extra: Sequence[str]) -> str:
    """``; did you mean --policy?`` for a mistyped option of ``command``."""
    import difflib

    options = [option for action in parser._actions for option in action.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            options += [option for sub in action.choices[command]._actions for option in sub.option_strings]
    guesses = [match for word in extra if word.startswith("--")
               for match in difflib.get_close_matches(word.partition("=")[0], options, n=1)]
    return f"; did you mean {', '.join(guesses)}?" if guesses else ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # (argparse reports them as the top command's, under its name)
        command = f"{parser.prog} {args.command}" if args.command else parser.prog
        print(f"{command}: unrecognized arguments: {' '.join(extra)}{_did_you_mean(parser, args.command, extra)} "
              f"(`{command} --help` lists the options)", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "trace":
            from .trace_command import check_arguments

            check_arguments(args)  # before anything is imported or built
        return int(args.run(args))
    except UsageError as error:
        print(f"specfx {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `specfx explain g.pt | head`: the reader left, which is fine
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line too, and the shell's code for an interrupt
        print(f"specfx {args.command}: interrupted", file=sys.stderr)
        return 130
