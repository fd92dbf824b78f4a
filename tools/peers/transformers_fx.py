"""Run transformers' own FX tests with specfx standing in for transformers' tracer.

transformers (up to 4.x) ships FX tests for its models: ``test_torch_fx`` and
``test_torch_fx_output_loss`` of ``ModelTesterMixin`` (``tests/test_modeling_common.py``),
run for each model test class whose ``fx_compatible`` is True (the T5 family and a few
others override them, pickling the traced model). They trace a model with
``transformers.utils.fx.symbolic_trace(model, input_names)``, call the result on the
test's inputs and compare with eager. This script runs them with that function replaced,
in one or more modes:

- ``graph``: ``specfx.trace(model, example_kwargs=...)`` on the first call's inputs (the
  tests call the traced model right after tracing); the result pickles as the GraphModule;
- ``specializer``: ``specfx.Specializer(model)``;
- ``hf``: transformers' own tracer, for comparison;
- ``eager``: the model itself stands in for the traced one. A test that fails so is one whose
  harness does not work for that model (its inputs, its outputs); the "runnable" counts of the
  forced set are the tests that pass in this mode.

Two sets of test classes: ``claimed``, the classes whose own ``fx_compatible`` is True, and
``forced``, every other model test class, with ``fx_compatible`` set to True for the run
(on the class object in this process; no file is changed).

Usage::

    python -m tools.peers.transformers_fx PATH                       # claimed set, graph/specializer/hf
    python -m tools.peers.transformers_fx PATH --set forced --mode eager graph --models bert,gpt2
    python -m tools.peers.transformers_fx PATH -v                    # with full tracebacks
    python -m tools.peers.transformers_fx PATH --set forced --shard 0/8   # every 8th class: a sample

``PATH`` is a local copy of transformers' repository (the folder holding ``tests/``) at a
commit matching the installed transformers; ``docs/transformers.md`` says which version and
commit were measured and how to get them. The script fetches nothing and never writes into
that tree (no bytecode is written while it runs; the tests' own files go to temporary
folders). It prints, per set, a table of passed / failed / errored / skipped per mode, then
each mode's failures grouped by the first line of their error. Exit status 0.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import os
import signal
import sys
import time
import traceback
import unittest
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

import specfx

MODES = ("eager", "graph", "specializer", "hf")
TESTS = ("test_torch_fx", "test_torch_fx_output_loss")


# transformers' tracer fixes every shape, flag and branch of the traced call without a check;
# specfx is given the same freedom, each answer guarded (--policy narrows it)
POLICY: Any = specfx.Specialize.ALL


class TracedOnFirstCall:
    """``symbolic_trace(model, input_names)`` for specfx: the trace needs values, and the
    tests call the traced model right away, so the first call's inputs are the examples.
    Pickles as the GraphModule it holds."""

    def __init__(self, model: torch.nn.Module, input_names: Sequence[str]) -> None:
        self.model = model
        self.input_names = list(input_names)
        self.graph: Optional[torch.fx.GraphModule] = None

    def __call__(self, **kwargs: Any) -> Any:
        if self.graph is None:
            self.graph = specfx.trace(self.model, example_kwargs={k: v for k, v in kwargs.items()
                                                                  if k in self.input_names}, policy=POLICY)
        return self.graph(**kwargs)

    def __reduce__(self) -> Any:
        if self.graph is None:
            raise TypeError("traced on the first call: call it before pickling")
        return self.graph.__reduce__()


def _tracer_for(mode: str) -> Callable[..., Any]:
    if mode == "graph":
        return TracedOnFirstCall
    if mode == "specializer":
        return lambda model, input_names=None, **_: specfx.Specializer(model, POLICY)
    if mode == "eager":
        return lambda model, input_names=None, **_: model
    from transformers.utils import fx as hf_fx
    return hf_fx.symbolic_trace


@contextlib.contextmanager
def _substituted(mode: str) -> Iterator[None]:
    """``symbolic_trace`` replaced in transformers.utils.fx and in every module that imported
    it by name (the test mixins, the T5 family's tests), for the duration of one mode's run."""
    from transformers.utils import fx as hf_fx
    if mode == "hf":
        yield
        return
    original = hf_fx.symbolic_trace
    replacement = _tracer_for(mode)
    owners = [m for m in list(sys.modules.values())
              if getattr(m, "__dict__", None) is not None and m.__dict__.get("symbolic_trace") is original]
    try:
        for owner in owners:
            owner.symbolic_trace = replacement
        yield
    finally:
        for owner in owners:
            owner.symbolic_trace = original


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _Timeout(f"took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Outcome(collections.namedtuple("Outcome", "status first_line detail")):
    """One test in one mode: status is pass / fail / error / skip."""


def _run_one(case: type, name: str, timeout: int) -> Outcome:
    result = unittest.TestResult()
    result.buffer = True
    test = case(name)
    try:
        with _time_limit(timeout):
            test.run(result)
    except _Timeout as error:
        return Outcome("error", f"Timeout: {error}", "")
    if result.skipped:
        return Outcome("skip", result.skipped[0][1].splitlines()[0] if result.skipped[0][1] else "", "")
    for status, problems in (("fail", result.failures), ("error", result.errors)):
        if problems:
            text = problems[0][1]
            return Outcome(status, _first_error_line(text), text)
    return Outcome("pass", "", "")


def _first_error_line(formatted: str) -> str:
    """The first line of the exception a formatted traceback ends with (the line after its
    innermost frame's source lines), shortened."""
    lines = formatted.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    start = frames[-1] + 1 if frames else 0
    for line in lines[start:]:
        if line and not line.startswith(" "):
            return line[:200]
    return (lines[-1] if lines else "")[:200]


def discover(tree: str, models: Optional[Sequence[str]]) -> Tuple[List[Tuple[str, type]], List[str], List[Any]]:
    """The model test classes of ``tree`` (those with the FX tests and model classes), the
    modules that could not be imported, and the imported modules."""
    root = tree if os.path.isdir(os.path.join(tree, "tests")) else os.path.dirname(os.path.abspath(tree))
    if not os.path.isfile(os.path.join(root, "tests", "test_modeling_common.py")):
        raise SystemExit(f"transformers_fx: {tree} holds no tests/test_modeling_common.py")
    sys.path.insert(0, os.path.abspath(root))
    for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
        del sys.modules[name]  # (a package of the same name imported earlier: not transformers')
    folder = os.path.join(root, "tests", "models")
    found: List[Tuple[str, type]] = []
    broken: List[str] = []
    modules: List[Any] = []
    for model in sorted(os.listdir(folder)):
        if (models and model not in models) or not os.path.isdir(os.path.join(folder, model)):
            continue
        for filename in sorted(os.listdir(os.path.join(folder, model))):
            if not (filename.startswith("test_modeling_") and filename.endswith(".py")):
                continue
            if filename.startswith(("test_modeling_tf_", "test_modeling_flax_")):
                continue
            module_name = f"tests.models.{model}.{filename[:-3]}"
            try:
                module = importlib.import_module(module_name)
            except Exception as error:  # missing optional dependency, API drift
                broken.append(f"{module_name}: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
                continue
            modules.append(module)
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, unittest.TestCase)
                        and value.__module__ == module.__name__ and hasattr(value, "test_torch_fx")
                        and getattr(value, "all_model_classes", None)):
                    found.append((model, value))
    return found, broken, modules


def run(tree: str, sets: Sequence[str], modes: Sequence[str], models: Optional[Sequence[str]] = None,
        timeout: int = 300, limit: Optional[int] = None, verbose: bool = False,
        shard: Tuple[int, int] = (0, 1)) -> Dict[str, Any]:
    """Run the chosen sets in the chosen modes; print the tables; return the outcomes.
    ``shard`` (k, n): only every n-th test class of each set, from the k-th (a sample, or one
    of n runs that together cover the set)."""
    sys.dont_write_bytecode = True  # nothing is written into the test tree
    import transformers

    found, broken, modules = discover(tree, models)
    print(f"transformers_fx: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"specfx {specfx.__version__}; tests from {os.path.abspath(tree)}")
    print(f"{len(found)} model test classes; {len(broken)} test modules not importable")
    for line in broken[:20] if verbose else ():
        print(f"  not imported: {line}")
    outcomes: Dict[str, Dict[str, Dict[str, Outcome]]] = {}
    for chosen in sets:
        claimed = chosen == "claimed"
        cases = [(model, case) for model, case in found if bool(case.fx_compatible) == claimed]
        if limit is not None:
            cases = cases[:limit]
        cases = cases[shard[0]::shard[1]]
        per_mode: Dict[str, Dict[str, Outcome]] = {mode: {} for mode in modes}
        started = time.time()
        for _model, case in cases:
            forced_before = case.fx_compatible
            case.fx_compatible = True
            try:
                for name in TESTS:
                    key = f"{case.__module__.split('.')[-1]}::{case.__name__}::{name}"
                    for mode in modes:
                        if chosen == "forced" and mode != "eager" and "eager" in modes \
                                and per_mode["eager"][key].status != "pass":
                            continue  # not runnable: the harness fails with the model itself
                        began = time.time()
                        with _substituted(mode):
                            outcome = _run_one(case, name, timeout)
                        per_mode[mode][key] = outcome
                        if verbose:
                            print(f"  {mode:<11} {outcome.status:<5} {time.time() - began:>5.0f}s {key} "
                                  f"{outcome.first_line}", flush=True)
            finally:
                case.fx_compatible = forced_before
        outcomes[chosen] = per_mode
        _print_table(chosen, cases, per_mode, time.time() - started)
        _print_failures(per_mode, verbose)
    return outcomes


def _print_table(chosen: str, cases: Sequence[Tuple[str, type]], per_mode: Dict[str, Dict[str, Outcome]],
                 seconds: float) -> None:
    print(f"\n{chosen} set: {len(cases)} test classes, {len(cases) * len(TESTS)} tests ({seconds:.0f}s)")
    print(f"  {'mode':<12} {'ran':>5} {'pass':>5} {'fail':>5} {'error':>6} {'skip':>5}")
    for mode, results in per_mode.items():
        counts = collections.Counter(outcome.status for outcome in results.values())
        print(f"  {mode:<12} {len(results):>5} {counts['pass']:>5} {counts['fail']:>5} {counts['error']:>6} "
              f"{counts['skip']:>5}")


def _print_failures(per_mode: Dict[str, Dict[str, Outcome]], verbose: bool) -> None:
    for mode, results in per_mode.items():
        groups: Dict[str, List[str]] = collections.defaultdict(list)
        for key, outcome in results.items():
            if outcome.status in ("fail", "error"):
                groups[outcome.first_line].append(key)
        if not groups:
            continue
        print(f"\n  {mode}: failures by first error line")
        for first, keys in sorted(groups.items(), key=lambda item: -len(item[1])):
            print(f"    {len(keys):>3}  {first}")
            for key in keys[: None if verbose else 3]:
                print(f"           {key}")
            if not verbose and len(keys) > 3:
                print(f"           ... and {len(keys) - 3} more")
        if verbose:
            for key, outcome in results.items():
                if outcome.detail:
                    print(f"\n  --- {mode} {key}\n    " + outcome.detail.rstrip().replace("\n", "\n    "))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", help="local copy of transformers' repository (the folder holding tests/)")
    parser.add_argument("--set", dest="sets", nargs="+", choices=("claimed", "forced"), default=["claimed"],
                        help="claimed: fx_compatible=True classes (default); forced: every other one")
    parser.add_argument("--mode", dest="modes", nargs="+", choices=MODES,
                        default=["graph", "specializer", "hf"],
                        help="what stands in for transformers' symbolic_trace (eager: the model itself; "
                             "with the forced set, the other modes run only the tests eager passes)")
    parser.add_argument("--models", help="comma-separated model folders (tests/models/NAME) to run")
    parser.add_argument("--limit", type=int, help="at most this many test classes per set")
    parser.add_argument("--shard", default="0/1", metavar="K/N",
                        help="every N-th test class of each set, from the K-th (0-based): a sample, or one "
                             "of N runs that together cover the set")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test and mode (default 300)")
    parser.add_argument("--policy", default="all",
                        help="specfx's policy: 'all' flags (default, each answer guarded) or e.g. 'bool,iter'")
    parser.add_argument("-v", "--verbose", action="store_true", help="every outcome and full tracebacks")
    args = parser.parse_args(argv)
    modes = list(dict.fromkeys(args.modes))
    if "forced" in args.sets and "eager" not in modes:
        modes.insert(0, "eager")  # the runnable tests of the forced set are those eager passes
    models = args.models.split(",") if args.models else None
    try:
        shard = tuple(int(part) for part in args.shard.split("/"))
        if len(shard) != 2 or not 0 <= shard[0] < shard[1]:
            raise ValueError
    except ValueError:
        parser.error(f"--shard {args.shard}: expected K/N with 0 <= K < N, e.g. 0/4")
    global POLICY
    POLICY = specfx.Specialize.ALL if args.policy == "all" else args.policy
    try:
        run(args.tree, args.sets, modes, models, args.timeout, args.limit, args.verbose,
            (shard[0], shard[1]))
    except KeyboardInterrupt:
        traceback.print_exc(limit=1)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
