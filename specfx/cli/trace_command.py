"""``specfx trace MODULE:FACTORY``: check the command line, build the inputs and the model,
trace, report.

The arguments are checked first (:func:`check_arguments`, which imports nothing heavy);
then the inputs are built (torch is imported), then the model, so that each mistake is
reported before the slower steps run. Any failure after that is one line naming what
failed and where (``--traceback`` shows Python's traceback instead); a refusal is
specfx's explanation on one line, its fix spelled as options (``--policy iter``, ``--scope``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._policy.policy import Policy, parse_flags
from .._policy.spelling import Spelling, spelled
from .calibration import BatchesError, calibration_set
from .imports import current_directory_importable, quiet_import_noise
from .inputs import CheckedValue, UsageError, build, check_arguments as check_call, check_value

__all__ = ["CommandLineSpelling", "check_arguments", "one_line", "quiet_import_noise", "run"]


class CommandLineSpelling(Spelling):
    """The fixes as options of ``specfx trace``: ``--policy bool,iter``, ``--scope``."""

    def __init__(self, policy: Optional[str], check: int = 0, check_inputs: Sequence[str] = ()) -> None:
        self._granted = [w.strip() for w in (policy or "").replace("|", ",").split(",") if w.strip()]
        self._check, self._check_inputs = check, list(check_inputs)

    def grant(self, keyword: str) -> str:
        return f"pass --policy {','.join([*self._granted, keyword])}"

    def grant_in(self, module_path: str, keyword: str) -> str:
        return f"--scope '{module_path}={keyword}'"

    def concrete(self, name: str, value: Any) -> str:
        return f"--concrete-arg {name}={value!r}"

    def example_kwarg(self, name: str, value: Any) -> str:
        return f"--kwarg {name}={value!r}"

    def leaf(self) -> str:
        return "--leaf QUALNAME"

    def eval_mode(self) -> str:
        return "pass --eval (the model is put in eval mode before the trace)"

    def examples(self) -> str:
        return "Give positional inputs with --input EXPR and keyword inputs with --kwarg NAME=EXPR"

    def example_call(self, keyword: str) -> str:
        return f"specfx trace MODULE:FACTORY --input EXPR --policy {keyword}"

    def check_input(self, index: int) -> str:
        # (the checks run in the order _check_entries builds them: --check's, then each --check-input)
        if index < self._check:
            return f"--check input {index + 1} of {self._check} (random, the example's shapes)"
        given = index - self._check
        if given < len(self._check_inputs):
            return f"--check-input {self._check_inputs[given]!r}"
        return super().check_input(index)

    def other_assumptions(self) -> str:
        return ("trace with such an example (--input, --kwarg), or keep one graph per set of assumptions with "
                "specfx.Specializer(model, policy) in Python")


def _name_and_value(item: str, option: str, example: str) -> Tuple[str, CheckedValue]:
    name, sep, text = item.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise UsageError(f"{option} {item!r} must look like NAME=VALUE, e.g. {option} {example}")
    return name, check_value(text, option)


def _flags(text: str, option: str) -> None:
    try:
        parse_flags(text)
    except ValueError as error:
        raise UsageError(f"{option} {text!r}: {error}") from None


def check_arguments(args: argparse.Namespace) -> None:
    """Check every argument of ``specfx trace`` without importing torch; the parsed values
    are left on ``args`` for :func:`run`."""
    module_name, _, attribute = args.model.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"model {args.model!r} must look like package.module:factory")
    if args.policy is not None:
        _flags(args.policy, "--policy")
    scopes: Dict[str, str] = {}
    for item in args.scope:
        glob, sep, flags = item.rpartition("=")
        if not sep or not glob.strip():
            raise UsageError(f"--scope {item!r} must look like GLOB=FLAGS, e.g. --scope 'encoder.layer.*=iter'")
        _flags(flags, "--scope")
        scopes[glob.strip()] = flags
    args.scopes = scopes
    args.checked_inputs = [check_value(text, "--input") for text in args.input]
    args.checked_kwargs = dict(_name_and_value(item, "--kwarg", "'attention_mask=ones(2, 8, dtype=int64)'")
                               for item in args.kwarg)
    args.checked_concrete = dict(_name_and_value(item, "--concrete-arg", "use_cache=False")
                                 for item in args.concrete_arg)
    clash = sorted(set(args.checked_kwargs) & set(args.checked_concrete))
    if clash:
        raise UsageError(f"{clash[0]} is given both with --kwarg and --concrete-arg; give it one way "
                         f"(--concrete-arg bakes the value in, --kwarg keeps it an input)")
    if args.check < 0:
        raise UsageError("--check takes a count >= 0")
    args.checked_check_inputs = [check_call(text, "--check-input") for text in args.check_input]
    for leaf in args.leaf:
        if not leaf.strip() or leaf.count(":") > 1:
            raise UsageError(f"--leaf {leaf!r}: give a qualified submodule name (encoder.pooler) or a class "
                             f"(torch.nn.MultiheadAttention, mypkg.blocks:Attention)")
    for option, path in (("--out", args.out), ("--save", args.save)):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            raise UsageError(f"{option} {path!r}: the folder {folder} does not exist")


def _where(error: BaseException) -> str:
    """``file:line`` of the innermost frame of ``error`` outside specfx and torch: the code
    (the user's, or a library's such as transformers) that failed."""
    import torch

    skip = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(torch.__file__))
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    frame = frames[-1]
    filename = os.path.relpath(frame.filename) if frame.filename.startswith(os.getcwd()) else frame.filename
    source = f": {frame.line.strip()}" if frame.line else ""
    return f" (at {filename}:{frame.lineno}{source})"


def one_line(text: str) -> str:
    """A multi-line message (what, the fix, where, the docs) as one line: a command's failure is
    one line on stderr, whatever tool reads it."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _one_line(error: BaseException) -> str:
    from .._policy.messages import without_fx_types

    text = without_fx_types(str(error).strip())
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}{': ' + first if first else ''}{_where(error)}"


def _load(target: str, as_function: bool) -> Any:
    import torch

    module_name, _, attribute = target.partition(":")
    try:
        with current_directory_importable():
            module = importlib.import_module(module_name)
    except ImportError as error:
        hint = ""
        if module_name.partition(".")[0] == getattr(error, "name", None):
            hint = f" (searched the current directory {os.getcwd()} and the installed packages)"
        raise UsageError(f"cannot import {module_name}: {error}{hint}") from None
    except Exception as error:
        raise UsageError(f"importing {module_name} raised {_one_line(error)}") from None
    obj: Any = module
    try:
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise UsageError(f"{module_name} has no attribute {attribute!r}") from None
    if as_function:
        return obj
    model = obj
    if callable(obj) and not isinstance(obj, torch.nn.Module):
        try:
            model = obj()
        except TypeError as error:
            raise UsageError(f"{target}() failed ({error}); if it is the function to trace, "
                             f"not a factory, pass --function") from None
        except Exception as error:
            raise UsageError(f"{target}() raised {_one_line(error)}") from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"{target} built an object of type {type(model).__name__}, not an nn.Module; pass --function to trace "
            f"the callable itself"
        )
    return model


def _leaves(model: Any, names: List[str]) -> List[Any]:
    """``--leaf`` values: a submodule's qualified name, or a module class (``pkg.mod:Class``,
    ``torch.nn.MultiheadAttention``, or a torch.nn class by its name)."""
    import torch

    submodules = dict(model.named_modules()) if isinstance(model, torch.nn.Module) else {}
    leaves: List[Any] = []
    for name in names:
        name = name.strip()
        if ":" not in name and name in submodules:
            leaves.append(name)
            continue
        found = _class_named(name)
        if found is None:
            known = ", ".join(n for n in list(submodules)[1:5]) or "(none)"
            raise UsageError(f"--leaf {name!r} is neither a submodule of the model (qualified names look like "
                             f"{known}) nor an importable nn.Module class")
        leaves.append(found)
    return leaves


def _class_named(name: str) -> Optional[type]:
    import torch

    module_name, sep, attribute = name.partition(":")
    if not sep:
        module_name, _, attribute = name.rpartition(".")
        if not module_name or module_name in ("nn", "torch.nn"):
            module_name = "torch.nn"
    try:
        with current_directory_importable():
            obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if isinstance(obj, type) and issubclass(obj, torch.nn.Module) else None


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


def _positional_names(model: Any, count: int) -> List[str]:
    import inspect

    import torch

    fn = model.forward if isinstance(model, torch.nn.Module) else model
    return list(inspect.signature(fn).parameters)[:count]


def _check_entries(args: argparse.Namespace, model: Any, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]
                   ) -> Optional[List[Any]]:
    """``check_inputs`` for ``trace()``: ``--check`` random inputs of the example's shapes, then
    each ``--check-input`` (``trace()`` gives eager the ``--concrete-arg`` values too)."""
    calls: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = []
    for _ in range(args.check):
        calls.append((tuple(_random_like(v) for v in inputs), {k: _random_like(v) for k, v in kwargs.items()}))
    for positional, named in args.checked_check_inputs:
        calls.append((tuple(build(v) for v in positional), {k: build(v) for k, v in named.items()}))
    if not calls:
        return None
    entries: List[Any] = []
    for positional, named in calls:
        if not named:
            entries.append(positional)
            continue
        # check_inputs entries are tuples or dicts: pass everything by name
        names = _positional_names(model, len(positional))
        entries.append({**dict(zip(names, positional)), **named})
    return entries


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    """A warning raised while the command runs, said as the command's own line (not file:line: source)."""
    print(f"specfx trace: {category.__name__}: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Run ``specfx trace`` on checked arguments (:func:`check_arguments`)."""
    words = CommandLineSpelling(args.policy, args.check, args.check_input)
    with quiet_import_noise(), spelled(words), warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return _run(args)
        except UsageError:
            raise
        except Exception as error:
            if args.traceback:
                raise
            print(f"specfx trace: tracing failed: {_one_line(error)}; --traceback shows Python's traceback",
                  file=sys.stderr)
            return 1


def _run(args: argparse.Namespace) -> int:
    import torch

    from .._graph import report
    from .._trace import trace as tracing
    from ..errors import SpecfxError

    try:  # an argument file: read before the model is built
        calibration = calibration_set(args)
    except BatchesError as error:
        raise UsageError(str(error)) from None
    inputs = tuple(build(v) for v in args.checked_inputs)
    kwargs = {name: build(v) for name, v in args.checked_kwargs.items()}
    concrete = {name: build(v) for name, v in args.checked_concrete.items()}
    model = _load(args.model, args.function)
    if args.eval and isinstance(model, torch.nn.Module):
        model.eval()
    leaves = _leaves(model, args.leaf)
    checks = _check_entries(args, model, inputs, kwargs)
    policy = Policy(parse_flags(args.policy or ""),
                    scopes={glob: Policy(parse_flags(flags)) for glob, flags in args.scopes.items()})
    print(f"tracing {args.model} ...", file=sys.stderr)
    if not (inputs or kwargs or calibration):
        print("specfx trace: no --input or --kwarg: tracing without example values, as torch.fx does (a "
              "decision on a value is refused); give the inputs to trace with values", file=sys.stderr)
    start = time.perf_counter()
    try:
        with _Ticker("tracing"):
            gm = tracing.trace(model, inputs if (inputs or kwargs) else None, kwargs or None,
                               policy=policy, concrete_args=concrete or None, guards=not args.no_guards,
                               check_inputs=checks, leaf_modules=leaves, calibration=calibration)
    except SpecfxError as error:
        if args.traceback:
            raise
        print(f"specfx trace: {type(error).__name__}: {one_line(str(error))}", file=sys.stderr)
        return 1
    nodes = len(gm.graph.nodes)
    count = len(checks or ())
    print(f"traced {nodes} nodes in {time.perf_counter() - start:.2f} s"
          + (f"; {count} check input(s) agree with eager" if count else ""), file=sys.stderr)
    print(gm.code.strip())
    print()
    print(report.explain(gm))
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


class _Ticker:
    """Prints elapsed time to stderr every few seconds while a long trace runs."""

    def __init__(self, label: str, every: float = 5.0) -> None:
        import threading

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
