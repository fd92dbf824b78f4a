"""Run PyTorch's own FX tests with specfx standing in for torch.fx's tracer.

PyTorch's ``test/test_fx.py`` (class ``TestFX``) is the reference for drop-in
compatibility: traced without example inputs, specfx should behave exactly
like ``torch.fx.symbolic_trace``. This script replaces, for the whole run,

- ``torch.fx.Tracer`` and ``torch.fx._symbolic_trace.Tracer`` by ``specfx.SpecTracer``;
- ``torch.fx.symbolic_trace`` and ``torch.fx._symbolic_trace.symbolic_trace`` by
  ``symbolic_trace(root, concrete_args=None)`` = ``specfx.trace(root, concrete_args=...)``;

then imports the test file (so its own ``from torch.fx import symbolic_trace,
Tracer`` binds the replacements; they are also rebound on the module afterwards
in case it was imported earlier), runs the chosen test class with unittest and
prints pass / fail / error / skip counts and, for each failing test, the first
line of its error and where in the test file it was raised.

Usage::

    python -m tools.peers.fx_tests /path/to/test_fx.py               # TestFX under specfx
    python -m tools.peers.fx_tests /path/to/test_fx.py --baseline    # stock torch.fx, for comparison
    python -m tools.peers.fx_tests /path/to/test_fx.py --examples    # checkGraphModule traces with
                                                                     # its inputs as example inputs
    python -m tools.peers.fx_tests /path/to/test_fx.py -k pickle -v  # only tests whose name contains
                                                                     # "pickle", with full tracebacks
    python -m tools.peers.fx_tests /path/to/test_fx.py --class all   # every test class in the file
                                                                     # (TestFunctionalTracing, ...), a total
    python -m tools.peers.fx_tests /path/to/test_fx.py --compare     # the three modes, each in its own
                                                                     # process: counts, and each test whose
                                                                     # outcome is not stock's

``--compare`` (with ``--class all`` for the whole file) is the drop-in check: without
example inputs every test must have stock's outcome; with them every test stock passes
must pass (one that passes only with examples is listed, and is no difference). Its exit
status is 0 when that holds; ``--json PATH`` writes one mode's per-test outcomes.

The test file is not part of this repository: take ``test/test_fx.py`` of the
PyTorch release that is installed, with the ``test/fx/`` helpers it imports
(``fx/named_tup.py``, ``fx/test_future.py``, and the sibling suites it
re-exports, or delete those imports) beside it in a ``fx/`` folder;
``docs/guarantees.md`` has the commit measured and the counts. ``torch.testing._internal`` ships
with torch; it needs the ``expecttest`` package. The exit status is 0 when
nothing failed.

Tracer classes defined inside torch keep the base they bound on import: those
of modules that ``import torch`` already loaded (``Transformer``'s tracer,
``make_fx``'s ``PythonKeyTracer``) stay stock torch.fx, and tests of them
exercise torch.fx, not specfx; ``torch.fx.experimental.rewriter``, first
imported by the test file after the replacement, makes ``RewritingTracer`` a
``SpecTracer`` subclass, so the ``test_ast_rewriter_*`` tests do cover specfx.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
import types
import unittest
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch.fx import _symbolic_trace

import specfx

_ORIGINALS: Dict[Tuple[Any, str], Any] = {}


def symbolic_trace(root: Any, concrete_args: Optional[Dict[str, Any]] = None) -> torch.fx.GraphModule:
    """``torch.fx.symbolic_trace`` done by specfx (no example inputs)."""
    return specfx.trace(root, concrete_args=concrete_args)


def _replace(owner: Any, name: str, value: Any) -> None:
    _ORIGINALS.setdefault((owner, name), getattr(owner, name))
    setattr(owner, name, value)


def install() -> None:
    """Put specfx in place of torch.fx's tracer for the rest of the process."""
    for owner in (torch.fx, _symbolic_trace):
        _replace(owner, "Tracer", specfx.SpecTracer)
        _replace(owner, "symbolic_trace", symbolic_trace)


def rebind(module: types.ModuleType) -> None:
    """Point the test module's own imported names at the replacements too."""
    for name, value in (("Tracer", specfx.SpecTracer), ("symbolic_trace", symbolic_trace)):
        if name in vars(module):
            setattr(module, name, value)


def check_with_examples(self: Any, m: Any, args: Any, kwargs: Optional[Dict[str, Any]] = None) -> None:
    """``TestFX.checkGraphModule`` with example inputs: the module is traced by ``specfx.trace``
    on the very inputs the test then calls it with, and the graph must give the module's result."""
    kwargs = kwargs or {}
    expected = m(*args, **kwargs)
    gm = specfx.trace(m, tuple(args), kwargs or None)
    gm.graph.lint()
    self.assertEqual(expected, gm(*args, **kwargs))


def uninstall() -> None:
    """Undo :func:`install`."""
    for (owner, name), value in _ORIGINALS.items():
        setattr(owner, name, value)
    _ORIGINALS.clear()


def load_test_module(path: str) -> types.ModuleType:
    """Import the test file under its own name (pickles made by the tests refer to it)."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # for its `from fx.named_tup import ...`
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"fx_compat: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _Result(unittest.TestResult):
    """Collects outcomes by test name; test output is buffered and dropped."""

    def __init__(self, test_file: str) -> None:
        super().__init__()
        self.buffer = True
        self.test_file = os.path.abspath(test_file)
        self.passed: List[str] = []
        self.outcome: Dict[str, str] = {}  # "Class.test" -> passed / FAIL / ERROR / skipped / ...
        self.problems: List[Tuple[str, str, str, str]] = []  # (kind, name, first line, full traceback)

    def absorb(self, other: "_Result") -> None:
        """Add another run's outcomes to this one (the total over several classes)."""
        self.testsRun += other.testsRun
        self.passed += other.passed
        self.problems += other.problems
        self.skipped += other.skipped
        self.expectedFailures += other.expectedFailures
        self.unexpectedSuccesses += other.unexpectedSuccesses
        self.outcome.update(other.outcome)
        self.failures += other.failures
        self.errors += other.errors

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self.passed.append(_name(test))
        self.outcome[_qualified(test)] = "passed"

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self.outcome[_qualified(test)] = "skipped"

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self.outcome[_qualified(test)] = "expected failure"

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._note("FAIL", test, err)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._note("ERROR", test, err)

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self.problems.append(("UNEXPECTED-SUCCESS", _name(test), "", ""))
        self.outcome[_qualified(test)] = "unexpected success"

    def _note(self, kind: str, test: unittest.TestCase, err: Any) -> None:
        exc_type, exc, tb = err
        text = str(exc).strip()
        first = f"{exc_type.__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
        line = None
        for frame, lineno in traceback.walk_tb(tb):
            if os.path.abspath(frame.f_code.co_filename) == self.test_file:
                line = lineno
        if line is not None:
            first += f"  [{os.path.basename(self.test_file)}:{line}]"
        full = "".join(traceback.format_exception(exc_type, exc, tb))
        self.problems.append((kind, _name(test), first, full))
        self.outcome[_qualified(test)] = kind


def _name(test: unittest.TestCase) -> str:
    return test.id().rsplit(".", 1)[-1]


def _qualified(test: unittest.TestCase) -> str:
    return ".".join(test.id().rsplit(".", 2)[-2:])


ALL = "all"  # --class all: every test class the file defines (PyTorch's device-type copies included)


def test_classes(module: types.ModuleType, class_name: str) -> List[Any]:
    """The test classes of ``module`` to run: ``class_name``, or with ``all`` every
    ``unittest.TestCase`` subclass defined in the file that has tests, in file order."""
    if class_name != ALL:
        case = getattr(module, class_name, None)
        if not (isinstance(case, type) and issubclass(case, unittest.TestCase)):
            raise SystemExit(f"fx_compat: {module.__file__} has no test class {class_name}")
        return [case]
    loader = unittest.TestLoader()
    return [value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, unittest.TestCase)
            and value.__module__ == module.__name__ and loader.getTestCaseNames(value)]


def outcomes(result: "_Result") -> Dict[str, str]:
    """Each test's outcome by ``Class.test``: passed, FAIL, ERROR, skipped, ... ."""
    return dict(result.outcome)


def _summary(result: "_Result") -> str:
    failures = sum(1 for p in result.problems if p[0] == "FAIL")
    errors = sum(1 for p in result.problems if p[0] == "ERROR")
    return (f"{result.testsRun} run: {len(result.passed)} passed, {failures} failed, {errors} errors, "
            f"{len(result.skipped)} skipped, {len(result.expectedFailures)} expected failures, "
            f"{len(result.unexpectedSuccesses)} unexpected successes")


def run(test_file: str, class_name: str = "TestFX", pattern: Optional[str] = None,
        baseline: bool = False, verbose: bool = False, examples: bool = False) -> _Result:
    """Run ``class_name`` of ``test_file`` (``all``: every test class in it); print and return
    the outcomes. ``examples``: the tests that check a module against its graph on given
    inputs (``checkGraphModule``) trace it with those inputs as examples."""
    if not baseline:
        install()
    module = load_test_module(test_file)
    if not baseline:
        rebind(module)
    tracer = ("stock torch.fx" if baseline
              else f"specfx {specfx.__version__} as torch.fx.Tracer/symbolic_trace"
              + (", checkGraphModule with example inputs" if examples else ""))
    total = _Result(test_file)
    cases = test_classes(module, class_name)
    for case in cases:
        if examples and not baseline and hasattr(case, "checkGraphModule"):
            case.checkGraphModule = check_with_examples
        tests: List[Any] = [t for t in unittest.TestLoader().loadTestsFromTestCase(case)
                 if pattern is None or pattern in _name(t)]
        result = _Result(test_file)
        unittest.TestSuite(tests).run(result)
        total.absorb(result)
        print(f"fx_compat: {case.__name__} from {test_file} with {tracer} (torch {torch.__version__})")
        print(_summary(result))
        for kind, name, first, full in sorted(result.problems, key=lambda p: p[1]):
            print(f"{kind:<6} {name}: {first}")
            if verbose and full:
                print("    " + full.rstrip().replace("\n", "\n    "))
        if verbose:
            for test, reason in result.skipped:
                print(f"SKIP   {_name(test)}: {reason}")
    if len(cases) > 1:
        print(f"fx_compat: all {len(cases)} classes: {_summary(total)}")
    return total


_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES: Tuple[Tuple[str, List[str]], ...] = (("stock `torch.fx`", ["--baseline"]), ("specfx, no example inputs", []),
         ("specfx, `checkGraphModule` with example inputs", ["--examples"]))


def subprocess_outcomes(command: List[str]) -> Dict[str, str]:
    """Run ``command`` (this script, one mode) in a process of its own, from the project's
    root, and return the per-test outcomes it wrote with ``--json``."""
    import json
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "outcomes.json")
        subprocess.run([*command, "--json", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, cwd=_PROJECT_ROOT)
        if not os.path.exists(out):
            raise SystemExit(f"fx_compat: `{' '.join(command[1:])}` ended before writing its outcomes; "
                             "run it to see why")
        with open(out) as f:
            found: Dict[str, str] = json.load(f)
    return found


def compare(test_file: str, class_name: str = "TestFX", pattern: Optional[str] = None) -> int:
    """Run the file under stock torch.fx, under specfx without example inputs and with them,
    each in a process of its own (the swap is process-wide and the test file is imported
    once), and print a row of counts per mode and every test whose outcome differs from
    stock. Returns 0 when all three modes agree test by test."""
    rows, per_mode = [], []
    for label, flags in MODES:
        command = [sys.executable, "-m", "tools.peers.fx_tests", os.path.abspath(test_file),
                   "--class", class_name, *flags] + (["-k", pattern] if pattern else [])
        found = subprocess_outcomes(command)
        per_mode.append(found)
        counts = [sum(1 for o in found.values() if o == kind)
                  for kind in ("passed", "FAIL", "ERROR", "skipped")]
        rows.append(f"| {label} | {len(found)} | " + " | ".join(map(str, counts)) + " |")
    print(f"| {class_name}: mode | run | passed | failed | errors | skipped |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    # Without examples specfx must be torch.fx test by test; with examples it must pass what
    # stock passes, and may pass more (a test that fails only because symbolic tracing has
    # no values), which is listed but is no difference.
    stock, differ = per_mode[0], 0
    for index, ((label, _), found) in enumerate(zip(MODES[1:], per_mode[1:])):
        for name in sorted(set(stock) | set(found)):
            before, after = stock.get(name, "not run"), found.get(name, "not run")
            if before == after:
                continue
            if index == 1 and after == "passed" and before in ("FAIL", "ERROR"):
                print(f"PASSES ONLY WITH EXAMPLES {name}: stock {before}")
                continue
            differ += 1
            print(f"DIFFERS ({label}) {name}: stock {before}, specfx {after}")
    print("fx_compat: every test has stock's outcome in every mode" if not differ
          else f"fx_compat: {differ} outcomes differ from stock")
    return 0 if not differ else 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", help="path to PyTorch's test/test_fx.py")
    parser.add_argument("--class", dest="class_name", default="TestFX",
                        help=f"test class to run (default TestFX; {ALL!r}: every test class in the file)")
    parser.add_argument("-k", dest="pattern", help="only tests whose name contains this text")
    parser.add_argument("--baseline", action="store_true", help="run with stock torch.fx (no patching)")
    parser.add_argument("--examples", action="store_true",
                        help="checkGraphModule traces with its inputs as example inputs (specfx.trace(m, args, kwargs))")
    parser.add_argument("--compare", action="store_true",
                        help="run stock, specfx and specfx with examples, each in its own process; "
                             "print their counts and every test whose outcome differs from stock")
    parser.add_argument("--json", dest="json_path", help="also write each test's outcome to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print full tracebacks and skip reasons")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(args.test_file, args.class_name, args.pattern)
    result = run(args.test_file, args.class_name, args.pattern, args.baseline, args.verbose, args.examples)
    if args.json_path:
        import json

        with open(args.json_path, "w") as f:
            json.dump(outcomes(result), f, indent=1, sort_keys=True)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
