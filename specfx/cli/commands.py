"""``python -m specfx`` / ``specfx``: the command-line interface.

>>> main(["--help"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
SystemExit: 0
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pickle
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

from .calibration import BatchesError, add_calibration_commands, calibration_set

__all__ = ["main", "parse_input"]

EXAMPLES = """\
examples:
  specfx demo
  specfx trace torchvision.models:resnet18 --input 'randn(1, 3, 224, 224)' --check 3
  specfx trace mypkg.models:build_detector --input 'randn(2, 3, 512, 512)' --policy iter,bool \\
      --out detector_graph.py --save detector.pt
  specfx trace mypkg.ops:fused_op --function --input 'randn(4, 8)' --kwarg 'scale=0.5'
  specfx trace mypkg.models:tiny_distilbert --kwarg 'input_ids=randint(0, 100, (2, 8))' \\
      --kwarg 'attention_mask=ones(2, 8, dtype=int64)' --policy bool --check 3
  specfx explain detector.pt

--input/--kwarg values: a torch factory call (randn, rand, zeros, ones, empty, full,
arange, randint, tensor) with literal arguments and dtype=/device= keywords, e.g.
'ones(2, 8, dtype=float16)' or 'randn(1, 4, device="meta")', or a Python literal
(3, 0.5, True, None, [1, 2]).
"""

_FACTORIES = ("randn", "rand", "zeros", "ones", "empty", "full", "arange", "randint", "tensor")


class UsageError(Exception):
    """A bad command-line argument: reported as one line, exit code 2."""


def parse_input(text: str) -> Any:
    """Build an example input from ``text`` without ``eval``: a torch factory
    call with literal arguments, or a Python literal.

    >>> parse_input("ones(2, 3, dtype=float16)").dtype
    torch.float16
    >>> parse_input("[1, 2]")
    [1, 2]
    """
    import torch

    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise UsageError(f"cannot parse input {text!r}: {error.msg}") from None
    if isinstance(tree, ast.Call):
        name = tree.func.attr if isinstance(tree.func, ast.Attribute) else getattr(tree.func, "id", "")
        if name not in _FACTORIES:
            raise UsageError(f"input {text!r}: {name or 'this'}() is not one of {', '.join(_FACTORIES)}")
        try:
            args = [ast.literal_eval(a) for a in tree.args]
            if any(k.arg is None for k in tree.keywords):
                raise ValueError("**mapping is not a literal argument")
            kwargs = {str(k.arg): _keyword_value(k.value) for k in tree.keywords}
        except (ValueError, TypeError) as error:
            raise UsageError(f"input {text!r}: arguments must be literals ({error})") from None
        try:
            return getattr(torch, name)(*args, **kwargs)
        except (TypeError, RuntimeError, ValueError) as error:
            raise UsageError(f"input {text!r}: torch.{name} says: {str(error).splitlines()[0]}") from None
    try:
        return ast.literal_eval(tree)
    except ValueError:
        raise UsageError(f"input {text!r} is neither a torch factory call nor a Python literal") from None


def _keyword_value(node: ast.AST) -> Any:
    import torch

    if isinstance(node, (ast.Name, ast.Attribute)):  # dtype=float16 / dtype=torch.float16
        name = node.id if isinstance(node, ast.Name) else node.attr
        value = getattr(torch, name, None)
        if isinstance(value, torch.dtype):
            return value
        raise ValueError(f"unknown dtype {name!r}")
    return ast.literal_eval(node)


def _load(target: str, as_function: bool) -> Any:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"model {target!r} must look like package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"cannot import {module_name}: {error}") from None
    try:
        obj: Any = module
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise UsageError(f"{module_name} has no attribute {attribute!r}") from None
    if as_function:
        return obj
    import torch

    model = obj
    if callable(obj) and not isinstance(obj, torch.nn.Module):
        try:
            model = obj()
        except TypeError as error:
            raise UsageError(f"{target}() failed ({error}); if it is the function to trace, "
                             f"not a factory, pass --function") from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"{target} built an object of type {type(model).__name__}, not an nn.Module; pass --function to trace "
            f"the callable itself"
        )
    return model


def _random_like(value: Any) -> Any:
    import torch

    if not isinstance(value, torch.Tensor) or value.device.type == "meta":
        return value
    if value.is_floating_point() or value.is_complex():
        return torch.randn_like(value)
    if value.dtype == torch.bool:
        return torch.rand(value.shape) > 0.5
    low, high = (int(value.min()), int(value.max()) + 1) if value.numel() else (0, 1)
    return torch.randint(low, max(high, low + 1), value.shape, dtype=value.dtype)


class _Ticker:
    """Prints elapsed time to stderr every few seconds while a long trace runs."""

    def __init__(self, label: str, every: float = 5.0) -> None:
        self._label, self._every = label, every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.perf_counter()
        while not self._done.wait(self._every):
            print(f"  ... still {self._label} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)

    def __enter__(self) -> "_Ticker":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


def _demo(args: argparse.Namespace) -> int:
    from . import demo as _demo

    _demo.run()
    return 0


def _trace(args: argparse.Namespace) -> int:
    import torch

    from .._graph import report as _report

    from .._trace import trace as tracing
    from ..errors import SpecfxError

    model = _load(args.model, args.function)
    inputs = tuple(parse_input(text) for text in args.input)
    kwargs: Dict[str, Any] = {}
    for item in args.kwarg:
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--kwarg {item!r} must look like name=VALUE")
        kwargs[name] = parse_input(text)
    checks: Optional[List[Any]] = None
    if args.check:  # fresh values of the same shapes and dtypes
        names = _positional_names(model, len(inputs)) if kwargs else []
        checks = []
        for _ in range(args.check):
            positional = tuple(_random_like(v) for v in inputs)
            if kwargs:  # check_inputs entries are tuples or dicts: pass everything by name
                checks.append({**dict(zip(names, positional)), **{k: _random_like(v) for k, v in kwargs.items()}})
            else:
                checks.append(positional)
    print(f"tracing {args.model} ...", file=sys.stderr)
    start = time.perf_counter()
    try:
        with _Ticker("tracing"):
            gm = tracing.trace(model, inputs if (inputs or kwargs) else None, kwargs or None,
                               policy=args.policy, guards=not args.no_guards, check_inputs=checks,
                               calibration=calibration_set(args))
    except (SpecfxError, TypeError, ValueError, BatchesError) as error:
        print(f"specfx trace: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    nodes = len(gm.graph.nodes)
    print(f"traced {nodes} nodes in {time.perf_counter() - start:.2f} s"
          + (f"; {args.check} check input(s) agree with eager" if args.check else ""), file=sys.stderr)
    print(gm.code.strip())
    print()
    print(_report.explain(gm))
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(f"# Generated by specfx from {args.model}; policy {gm.specfx_policy!r}\n")
            handle.write(gm.code)
        print(f"wrote the generated code to {args.out}", file=sys.stderr)
    if args.save:
        torch.save(gm, args.save)
        print(f"saved the GraphModule to {args.save} (specfx explain {args.save} reads its records without "
              f"running it; loading it with torch.load(..., weights_only=False) runs its code)", file=sys.stderr)
    return 0


def _positional_names(model: Any, count: int) -> List[str]:
    import inspect

    import torch

    fn = model.forward if isinstance(model, torch.nn.Module) else model
    return list(inspect.signature(fn).parameters)[:count]


def _explain(args: argparse.Namespace) -> int:
    from .._graph.report import explain
    from .._graph.safe_load import UnsafeFileError, read_specializations

    try:
        if args.unsafe_load:
            import torch

            saved: Any = torch.load(args.file, weights_only=False)
        else:
            saved = read_specializations(args.file)
    except UnsafeFileError as error:
        print(f"specfx explain: {error}.\nIf you trust the file, pass --unsafe-load (loading a pickled "
              f"GraphModule runs the code stored in it).", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError) as error:
        print(f"specfx explain: cannot load {args.file}: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    try:
        print(explain(saved))
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
                       help="an nn.Module subclass or a function returning an nn.Module")
    trace.add_argument("--input", action="append", default=[], metavar="EXPR",
                       help="a positional example input (repeat for more), e.g. 'randn(1, 3, 224, 224)'")
    trace.add_argument("--kwarg", action="append", default=[], metavar="NAME=EXPR",
                       help="a keyword example input, e.g. 'attention_mask=ones(1, 128, dtype=int64)'")
    trace.add_argument("--policy", default=None, metavar="FLAGS",
                       help="what may be specialized: comma-separated iter, bool, shapes, scalars (or ALL)")
    trace.add_argument("--function", action="store_true", help="trace the callable itself, not what it returns")
    trace.add_argument("--check", type=int, default=0, metavar="N",
                       help="also run N random inputs of the same shapes through eager and traced")
    trace.add_argument("--out", metavar="FILE.py", help="write the generated code to this file")
    trace.add_argument("--save", metavar="FILE.pt", help="torch.save the GraphModule to this file")
    trace.add_argument("--no-guards", action="store_true", help="emit no guards (unsafe; for inspection)")
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if getattr(args, "check", 0) < 0:
        print("specfx trace: --check takes a count >= 0", file=sys.stderr)
        return 2
    try:
        return int(args.run(args))
    except UsageError as error:
        print(f"specfx {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `specfx explain g.pt | head`: the reader left, which is fine
        sys.stderr.close()
        return 0

