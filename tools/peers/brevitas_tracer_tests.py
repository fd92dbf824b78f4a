"""Run Brevitas' own tracer tests with specfx standing in for Brevitas' tracers.

Brevitas' ``tests/brevitas/fx/test_tracer.py`` checks that its ``value_trace`` and
``brevitas_symbolic_trace`` make graphs that compute what the model computes, on
torchvision models (train and eval mode) and on small modules that unpack shapes,
chunk and concatenate, add in place, branch on ``None``, on ``isinstance`` and on
the data. This script replaces, for the run,

- ``brevitas.fx.value_trace(model, value_args={"x": t})`` by
  ``specfx.trace(model, example_kwargs={"x": t}, policy=Policy(Specialize.ALL))``
  (value_trace resolves every value from its example, so specfx is granted every flag);
- ``brevitas.fx.brevitas_symbolic_trace(model)`` by ``specfx.trace(model)`` (no example);

then runs the test file with pytest, deselecting the tests that download pretrained
weights (``pretrained=True``), and prints passed / failed with the first line of each
failure. The exit status is 0 when nothing failed.

Usage::

    python -m tools.peers.brevitas_tracer_tests PATH/TO/brevitas          # the repository's root
    python -m tools.peers.brevitas_tracer_tests PATH/TO/brevitas --baseline  # Brevitas' own tracers
    python -m tools.peers.brevitas_tracer_tests PATH/TO/brevitas -k densenet -v

The repository is a local copy of Brevitas' source (the wheel ships no tests) at the
tag of the installed Brevitas; this script fetches nothing and writes nothing into it
(no bytecode, no pytest cache; the tests run from it, against the installed Brevitas).
The torchvision models need ``torchvision``; where its compiled operators cannot load
beside the installed torch (a CUDA build of torchvision beside the CPU torch), its
pure-Python ``torchvision.models`` is loaded from the package folder without them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import types
import warnings
from typing import Any, Dict, List, Optional

import torch

import specfx
from specfx import Policy, Specialize

TEST_FILE = os.path.join("tests", "brevitas", "fx", "test_tracer.py")


def value_trace(root: torch.nn.Module, concrete_args: Optional[Dict[str, Any]] = None,
                value_args: Optional[Dict[str, Any]] = None) -> torch.fx.GraphModule:
    """``brevitas.fx.value_trace``'s signature, traced by specfx from the same values."""
    return specfx.trace(root, example_kwargs=dict(value_args or {}), concrete_args=concrete_args,
                        policy=Policy(Specialize.ALL))


def symbolic_trace(root: torch.nn.Module, concrete_args: Optional[Dict[str, Any]] = None) -> torch.fx.GraphModule:
    """``brevitas.fx.brevitas_symbolic_trace``'s signature: specfx without examples."""
    return specfx.trace(root, concrete_args=concrete_args)


def load_torchvision() -> str:
    """Import torchvision; where its compiled operators cannot load, make its pure-Python
    subpackages importable without them. Says which."""
    try:
        import torchvision.models  # noqa: F401
        return "torchvision"
    except (ImportError, RuntimeError, OSError) as error:
        failure = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return "no torchvision: the torchvision model tests fail at import"
    package = types.ModuleType("torchvision")
    package.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
    sys.modules["torchvision"] = package  # its __init__ (which loads the compiled operators) is skipped
    return f"torchvision.models without its compiled operators ({failure})"


class Substitute:
    """A pytest plugin: swaps Brevitas' tracers for specfx's before the test file is
    imported (it binds them with ``from brevitas.fx import ...``), deselects the tests
    that download weights, and collects the outcomes."""

    def __init__(self, baseline: bool) -> None:
        self.baseline = baseline
        self.outcomes: Dict[str, str] = {}

    def pytest_configure(self, config: Any) -> None:
        with warnings.catch_warnings():  # (brevitas.fx is deprecated in favour of torch.fx)
            warnings.simplefilter("ignore", DeprecationWarning)
            import brevitas.fx

        if not self.baseline:
            brevitas.fx.value_trace = value_trace
            brevitas.fx.brevitas_symbolic_trace = symbolic_trace

    def pytest_collection_modifyitems(self, config: Any, items: List[Any]) -> None:
        offline = [item for item in items if not getattr(item, "callspec", None)
                   or item.callspec.params.get("pretrained") is not True]
        config.hook.pytest_deselected(items=[item for item in items if item not in offline])
        items[:] = offline

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            first = ""
            if report.outcome == "failed":
                lines = [line for line in str(report.longrepr).splitlines() if line.startswith("E ")]
                first = lines[0][1:].strip() if lines else str(report.longrepr).splitlines()[-1]
            self.outcomes.setdefault(report.nodeid.split("::", 1)[1], f"{report.outcome} {first}".strip())


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repository", help="a local copy of Brevitas' repository (its root)")
    parser.add_argument("--baseline", action="store_true", help="Brevitas' own tracers, for comparison")
    parser.add_argument("-k", default=None, help="only tests whose name matches (pytest's -k)")
    parser.add_argument("-v", action="store_true", help="pytest's full report of each failure")
    args = parser.parse_args(argv)
    test_file = os.path.join(args.repository, TEST_FILE)
    if not os.path.isfile(test_file):
        parser.error(f"{test_file} not found: pass the root of a copy of Brevitas' repository")

    import pytest

    sys.dont_write_bytecode = True  # write nothing into the copy
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    print(load_torchvision())
    plugin = Substitute(args.baseline)
    options = [test_file, "-p", "no:cacheprovider", "-p", "no:randomly", "-c", os.devnull,
               "--rootdir", args.repository, "-q", "-W", "ignore::UserWarning",
               "--tb=short" if args.v else "--tb=line", "-o", "console_output_style=classic"]
    if args.k:
        options += ["-k", args.k]
    if not args.v:
        options += ["--no-header", "-rN"]
    pytest.main(options, plugins=[plugin])
    passed = [name for name, outcome in plugin.outcomes.items() if outcome == "passed"]
    failed = {name: outcome for name, outcome in plugin.outcomes.items() if outcome != "passed"}
    tracer = "Brevitas' own tracers" if args.baseline else "specfx for value_trace and brevitas_symbolic_trace"
    print(f"\n{tracer}: {len(passed)}/{len(plugin.outcomes)} passed, {len(failed)} failed")
    for name, outcome in failed.items():
        print(f"  {name}: {outcome}")
    return 1 if failed or not plugin.outcomes else 0


if __name__ == "__main__":
    sys.exit(main())
