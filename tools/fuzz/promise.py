"""The differential fuzzer's grammar for the promise: outputs, gradients and writes.

"The graph returns what eager returns — outputs, gradients, and writes to inputs — or
raises." Each family here generates programs of one class of that promise
(autograd, ambient settings, RNG control, Python state, writes to inputs, builtins and
types), each a small ``f`` with the module-level state it reads or writes. A program is
traced under ``Specialize.ALL`` and run, eager and graph from the same state, on its
example and fresh inputs, each input under a context (a process-wide setting flipped
between the trace and the call) and a grad mode; three oracles compare them:

- outputs (values, dtypes, ``requires_grad``);
- gradients: backward from both outputs, then the ``.grad`` of every leaf argument;
- writes: the arguments after the call (tensors, lists, dicts) and the module state of
  the program (its globals), and the trace itself must leave that state as it found it.

Each program ends in one outcome, counted per family: *answered* (every input agreed),
*guarded* (a ``GuardError`` on some input, eager's answer on the others), *refused*
(``SpecializationError`` while tracing), *silent* (an output, a gradient or a write
differs, or the trace changed state: must be 0) or *crash* (another exception where
eager works). ``python -m tools.fuzz.run --grammar promise`` prints the table;
``tests/test_fuzz.py::TestPromiseGrammar`` reverts fixes one at a time and checks that
the fuzzer finds the planted silent answers.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import linecache
import math
import random
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

import specfx
from specfx import GuardError, SpecializationError

__all__ = ["CONTEXTS", "FAMILIES", "OUTCOMES", "PromiseCase", "check", "generate"]

OUTCOMES = ("answered", "guarded", "refused", "silent", "crash")


def _default_dtype(dtype: torch.dtype) -> Callable[[], Any]:
    @contextlib.contextmanager
    def context() -> Iterator[None]:
        before = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(before)
    return context


def _setting(read: Callable[[], Any], write: Callable[[Any], Any], value: Any) -> Callable[[], Any]:
    @contextlib.contextmanager
    def context() -> Iterator[None]:
        before = read()
        write(value)
        try:
            yield
        finally:
            write(before)
    return context


# Process-wide settings an input may be called under (the trace runs under "plain").
CONTEXTS: Dict[str, Callable[[], Any]] = {
    "plain": contextlib.nullcontext,
    "float64 default": _default_dtype(torch.float64),
    "deterministic": _setting(torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, True),
    "matmul medium": _setting(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, "medium"),
    "anomaly": _setting(torch.is_anomaly_enabled, torch.set_anomaly_enabled, True),
    "inference mode": torch.inference_mode,
    "no grad": torch.no_grad,
    "warnings as errors": lambda: _warnings_as_errors(),
}


@contextlib.contextmanager
def _warnings_as_errors() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@dataclasses.dataclass
class PromiseCase:
    """One program: ``source`` defines ``f(*example)`` and the state it keeps; ``inputs`` are
    (arguments, context name) pairs; ``grad``: leaves require grad and the oracle backpropagates."""

    family: str
    source: str
    example: Tuple[Any, ...]
    inputs: List[Tuple[Tuple[Any, ...], str]]

    def build(self, tag: str) -> Dict[str, Any]:
        """Run ``source`` in a module namespace of its own (a file name of its own: locations have text)."""
        filename = f"<fuzzpromise{tag}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        namespace: Dict[str, Any] = {"torch": torch, "random": random, "functools": functools, "math": math,
                                     "warnings": warnings, "__name__": f"fuzzpromise{tag.replace('-', '_')}"}
        exec(compile(self.source, filename, "exec"), namespace)
        return namespace


def _t(ch: Any, *shape: int, grad: bool = False) -> torch.Tensor:
    x = torch.randn(*shape) * ch.choice([1.0, 0.5, 3.0]) + ch.choice([0.0, 0.3, -0.3])
    return x.requires_grad_(grad)


def _inputs(ch: Any, make: Callable[[], Tuple[Any, ...]], contexts: Tuple[str, ...] = ("plain",),
            n: int = 3) -> List[Tuple[Tuple[Any, ...], str]]:
    return [(make(), ch.choice(contexts)) for _ in range(n)]


_FUNCTIONS = '''
class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.k * x, None


class Branchy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        return x * w + 1 if ctx.needs_input_grad[1] else x * w

    @staticmethod
    def backward(ctx, grad):
        return -grad, grad * 2


class Clipped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1)
'''


def autograd(ch: Any) -> PromiseCase:
    """Class 1: custom Functions with backwards that are not forward's derivative, checkpointing,
    gradients and hooks taken inside forward."""
    body = ch.choice([
        "return RoundSTE.apply(x * 3) * w",
        "return Scaled.apply(x, 5.0) + w",
        "return Branchy.apply(x, w)",
        "return Clipped.apply(x) * w",
        "return torch.utils.checkpoint.checkpoint(lambda a: (a * w).sin(), x, use_reentrant=True)",
        "return torch.utils.checkpoint.checkpoint(lambda a: (a * w).sin(), x.detach(), use_reentrant=True) * w",
        "e = (x * w).pow(2).sum()\n    (g,) = torch.autograd.grad(e, x, create_graph=True)\n    return g * w",
        "y = x * w\n    y.register_hook(lambda g: g * 10)\n    return y.sum(-1)",
    ])
    n = ch.choice([2, 3])
    make = lambda: (_t(ch, n, grad=True), _t(ch, n, grad=ch.chance(0.7)))  # noqa: E731
    return PromiseCase("autograd", f"{_FUNCTIONS}\n\ndef f(x, w):\n    {body}\n", make(), _inputs(ch, make))


def ambient(ch: Any) -> PromiseCase:
    """Class 3: process-wide settings read in forward, flipped between the trace and the call."""
    body, contexts = ch.choice([
        ("return x.to(torch.get_default_dtype()) * 2", ("plain", "float64 default")),
        ("return x * 2 if torch.get_default_dtype() == torch.float32 else x", ("plain", "float64 default")),
        ("return x + torch.ones(x.shape[-1]).to(x.dtype)", ("plain", "float64 default")),
        ("return x * 3 if torch.are_deterministic_algorithms_enabled() else x", ("plain", "deterministic")),
        ("return x - 1 if torch.get_float32_matmul_precision() == 'highest' else x", ("plain", "matmul medium")),
        ("return x * 2 if torch.is_anomaly_enabled() else x + 1", ("plain", "anomaly")),
        ("return x * 2 if torch.is_inference_mode_enabled() else x + 1", ("plain", "inference mode")),
        ("return x * 2 if torch.is_grad_enabled() else x + 1", ("plain", "no grad")),
    ])
    n = ch.choice([2, 3])
    make = lambda: (_t(ch, n),)  # noqa: E731
    return PromiseCase("ambient", f"def f(x):\n    {body}\n", make(), _inputs(ch, make, contexts, 4))


def rng(ch: Any) -> PromiseCase:
    """Class 4: RNG control inside forward (seeding, state replay, forked RNG, held generators)."""
    state, body = ch.choice([
        ("", "torch.manual_seed(3)\n    return x + torch.randn(x.shape)"),
        ("", "s = torch.get_rng_state()\n    a = torch.rand(x.shape)\n    torch.set_rng_state(s)\n"
             "    return x + a - torch.rand(x.shape)"),
        ("", "with torch.random.fork_rng():\n        torch.manual_seed(5)\n        a = torch.rand(x.shape)\n"
             "    return x + a + torch.rand(x.shape)"),
        ("GEN = torch.Generator().manual_seed(1)\n", "GEN.manual_seed(7)\n    return x + torch.randn(x.shape, generator=GEN)"),
        ("GEN = torch.Generator().manual_seed(1)\n", "s = GEN.get_state()\n    a = torch.rand(x.shape, generator=GEN)\n"
                                                     "    GEN.set_state(s)\n    return x + a"),
        ("GEN = torch.Generator().manual_seed(1)\n", "return x + torch.randn(x.shape, generator=GEN)"),
        ("", "torch.manual_seed(0)\n    return torch.nn.functional.dropout(x, 0.5, training=True)"),
        ("", "return x * (torch.initial_seed() % 5)"),
    ])
    n = ch.choice([3, 4])
    make = lambda: (_t(ch, n),)  # noqa: E731
    return PromiseCase("rng", f"{state}\n\ndef f(x):\n    {body}\n", make(), _inputs(ch, make))


def python_state(ch: Any) -> PromiseCase:
    """Class 5: module globals, closures and caches read and written in forward."""
    state, body = ch.choice([
        ("STEP = 0\n", "global STEP\n    STEP += 1\n    return x * STEP"),
        ("SEEN = []\n", "SEEN.append(x.shape[0])\n    return x * len(SEEN)"),
        ("TABLE = {}\n", "TABLE['last'] = 1\n    return x + len(TABLE)"),
        ("@functools.lru_cache(None)\ndef coords(n):\n    return torch.arange(n)\n",
         "return x + coords(x.shape[-1])"),
        ("def make():\n    count = 0\n    def step(x):\n        nonlocal count\n        count += 1\n"
         "        return x * count\n    return step\nSTEPPER = make()\n", "return STEPPER(x)"),
        ("SCALE = 2.0\n", "return x * SCALE"),
        ("", "warnings.warn('note')\n    return x * 2"),
    ])
    n = ch.choice([2, 3])
    make = lambda: (_t(ch, n),)  # noqa: E731
    return PromiseCase("python state", f"{state}\n\ndef f(x):\n    {body}\n", make(),
                       _inputs(ch, make, ("plain", "warnings as errors")))


def input_writes(ch: Any) -> PromiseCase:
    """Class 6: forward writes to the containers and tensors it is given."""
    signature, body, make_args = ch.choice([
        ("x, cache", "cache.append(x * 2)\n    return x + 1", lambda n: (_t(ch, n), [_t(ch, n)])),
        ("x, d", "d['k'] = x.sum()\n    return x * 2", lambda n: (_t(ch, n), {"a": _t(ch, n)})),
        ("x, xs", "last = xs.pop()\n    return x + last", lambda n: (_t(ch, n), [_t(ch, n), _t(ch, n)])),
        ("x, y", "x.data = y\n    return x * 2", lambda n: (_t(ch, n), _t(ch, n))),
        ("x, y", "y.add_(x)\n    return x * y", lambda n: (_t(ch, n), _t(ch, n))),
        ("x, xs", "xs[0] = xs[0] + x\n    return x", lambda n: (_t(ch, n), [_t(ch, n)])),
        ("x, xs", "xs[0].mul_(2)\n    return x + xs[0]", lambda n: (_t(ch, n), [_t(ch, n)])),
    ])
    n = ch.choice([2, 3])
    make = lambda: make_args(n)  # noqa: E731
    return PromiseCase("input writes", f"def f({signature}):\n    {body}\n", make(), _inputs(ch, make))


def builtins_and_types(ch: Any) -> PromiseCase:
    """Classes 7 and 8: builtins of sizes and traced values, type and identity answers."""
    body = ch.choice([
        "return x * 2 if type(x) is torch.Tensor else x",
        "return x * 2 if type(x) == torch.Tensor else x - 1",
        "return x + 1 if type(x).__name__ == 'Tensor' else x",
        "q, r = divmod(x.shape[-1], 2)\n    return x[..., :q] * (r + 1)",
        "return x * round(x.shape[0] / 3)",
        "return x * 2 if not callable(x) else x",
        "torch._assert((x > -100).all(), 'too small')\n    return x * 2",
        "return x[: math.floor(x.shape[0] / 2) + 1]",
    ])
    make = lambda: (_t(ch, ch.choice([3, 4, 5]), ch.choice([2, 5])),)  # noqa: E731
    return PromiseCase("builtins", f"def f(x):\n    {body}\n", make(), _inputs(ch, make))


FAMILIES: Dict[str, Callable[[Any], PromiseCase]] = {
    "autograd": autograd, "ambient": ambient, "rng": rng, "python state": python_state,
    "input writes": input_writes, "builtins": builtins_and_types,
}


def generate(ch: Any, family: Optional[str] = None) -> PromiseCase:
    """One program of ``family``, or of a family chosen by ``ch``."""
    return FAMILIES[family if family is not None else ch.choice(sorted(FAMILIES))](ch)


# -- the oracles -------------------------------------------------------------------------------


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone()
        return copied.requires_grad_(True) if value.requires_grad else copied
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _state(namespace: Dict[str, Any], caches: bool = False) -> Dict[str, Any]:
    """The program's own state: its globals (not modules, functions or classes), the variables
    its functions' closures hold, and (``caches``) how many entries their caches hold."""
    state: Dict[str, Any] = {}
    for name, value in namespace.items():
        if name.startswith("__") or name in ("torch", "random", "functools", "math", "warnings"):
            continue
        if isinstance(value, torch.Generator):
            state[name] = value.get_state()
        elif callable(value) and not isinstance(value, type):
            for cell_name, cell in zip(getattr(getattr(value, "__code__", None), "co_freevars", ()),
                                       getattr(value, "__closure__", None) or ()):
                with contextlib.suppress(ValueError):
                    if not callable(cell.cell_contents):
                        state[f"{name}.{cell_name}"] = (cell, copy.deepcopy(cell.cell_contents))
            info = getattr(value, "cache_info", None)
            if info is not None and caches:
                state[f"{name}.cache"] = info().currsize
        elif not isinstance(value, type):
            state[name] = _clone(value)
    return state


def _restore(namespace: Dict[str, Any], saved: Dict[str, Any]) -> None:
    for name, value in saved.items():
        if name.endswith(".cache"):
            continue
        if "." in name:
            value[0].cell_contents = copy.deepcopy(value[1])
        elif isinstance(namespace.get(name), torch.Generator):
            namespace[name].set_state(value)
        else:
            namespace[name] = _clone(value)


def _comparable(state: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v[1] if isinstance(v, tuple) and len(v) == 2 and hasattr(v[0], "cell_contents") else v
            for k, v in state.items()}


def _same(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    except (AssertionError, TypeError, ValueError, RuntimeError):
        return False
    pairs = zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b))
    return all(not isinstance(x, torch.Tensor) or (x.requires_grad == y.requires_grad and x.dtype == y.dtype)
               for x, y in pairs)


def _run(fn: Callable[..., Any], args: Tuple[Any, ...], context: str, seed: int) -> Tuple[Any, Any, Any]:
    """``fn(*args)`` under ``context`` from RNG ``seed``: (output or the exception, the arguments after
    the call, the ``.grad`` of every leaf argument after a backward from the output)."""
    torch.manual_seed(seed)
    args = _clone(args)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            with CONTEXTS[context]():
                output = fn(*args)
    except Exception as error:
        return error, args, None
    leaves = [t for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad]
    outputs = [t for t in torch.utils._pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads: Any = None
    if outputs and leaves:
        try:
            sum(t.float().sum() * (i + 1) for i, t in enumerate(outputs)).backward()
            grads = [None if t.grad is None else t.grad.clone() for t in leaves]
        except Exception as error:
            grads = error
    return output, args, grads


def check(case: PromiseCase, tag: str) -> Tuple[str, str]:
    """Trace ``case`` under ``Specialize.ALL`` and run every input: its outcome (one of
    :data:`OUTCOMES`, or "invalid" when eager rejects the example) and what decided it."""
    namespace = case.build(tag)
    fn = namespace["f"]
    start = _state(namespace)
    first = _run(fn, case.example, "plain", 0)
    _restore(namespace, start)
    if isinstance(first[0], Exception):
        return "invalid", f"eager raised {type(first[0]).__name__} on the example"
    start = _state(namespace, caches=True)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            gm = specfx.trace(fn, _clone(case.example), policy=specfx.Policy(specfx.Specialize.ALL))
    except SpecializationError as error:
        changed = _changes(start, _state(namespace, caches=True))
        if changed:
            return "silent", f"the refused trace changed {changed}"
        return "refused", str(error).splitlines()[0]
    except Exception as error:
        return "crash", f"trace: {type(error).__name__}: {error}"
    changed = _changes(start, _state(namespace, caches=True))
    if changed:
        return "silent", f"the trace changed {changed}"
    guarded = False
    for index, (args, context) in enumerate([(case.example, "plain"), *case.inputs]):
        before = _state(namespace)
        eager = _run(fn, args, context, index)
        eager_state = _comparable(_state(namespace))
        _restore(namespace, before)
        graph = _run(gm, args, context, index)
        graph_state = _comparable(_state(namespace))
        _restore(namespace, before)
        if isinstance(eager[0], Exception):
            if not isinstance(graph[0], Exception):
                return "silent", f"input {index} ({context}): eager raised, the graph returned"
            continue
        if isinstance(graph[0], GuardError):
            guarded = True
            continue
        if isinstance(graph[0], Exception):
            return "crash", f"input {index} ({context}): {type(graph[0]).__name__}: {graph[0]}"
        for what, e, g in (("output", eager[0], graph[0]), ("arguments after the call", eager[1], graph[1]),
                           ("gradients", eager[2], graph[2]), ("state after the call", eager_state, graph_state)):
            if isinstance(e, Exception) or isinstance(g, Exception):
                if type(e) is not type(g):
                    return "silent", f"input {index} ({context}): {what}: {e!r} vs {g!r}"
            elif not _same(e, g):
                return "silent", f"input {index} ({context}): {what} differ"
    return ("guarded" if guarded else "answered"), ""


def _changes(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
    before, after = _comparable(before), _comparable(after)
    return [name for name in sorted(set(before) | set(after))
            if name not in before or name not in after or not _same(before[name], after[name])]


# -- running a corpus ----------------------------------------------------------------------------


def fuzz(n: int, seed: int, family: Optional[str] = None) -> Dict[str, Any]:
    """Programs ``0 .. n-1`` of ``seed`` (of one ``family`` if given): outcome counts per family,
    and the silent answers and crashes (index, family, what decided it, the source)."""
    from tools.fuzz.programs import RandomChooser

    counts: Dict[str, Dict[str, int]] = {}
    failures: List[Dict[str, Any]] = []
    for index in range(n):
        case = generate(RandomChooser(seed * 1_000_003 + index), family)
        outcome, why = check(case, f"-{seed}-{index}")
        row = counts.setdefault(case.family, dict.fromkeys((*OUTCOMES, "invalid"), 0))
        row[outcome] += 1
        if outcome in ("silent", "crash"):
            failures.append({"index": index, "family": case.family, "outcome": outcome, "why": why,
                             "source": case.source})
    return {"seed": seed, "n": n, "counts": counts, "failures": failures}


def print_table(result: Dict[str, Any]) -> None:
    """One row per family: how many programs ended in each outcome."""
    print(f"seed {result['seed']}, {result['n']} programs of the promise grammar (traced under Specialize.ALL)")
    print(f"{'family':<14}" + "".join(f"{o:>10}" for o in (*OUTCOMES, "invalid")))
    totals = dict.fromkeys((*OUTCOMES, "invalid"), 0)
    for family in sorted(result["counts"]):
        row = result["counts"][family]
        print(f"{family:<14}" + "".join(f"{row[o]:>10}" for o in (*OUTCOMES, "invalid")))
        for o in totals:
            totals[o] += row[o]
    print(f"{'all':<14}" + "".join(f"{totals[o]:>10}" for o in (*OUTCOMES, "invalid")))
    for failure in result["failures"][:20]:
        print(f"\n{failure['outcome'].upper()} program {failure['index']} ({failure['family']}): {failure['why']}")
        print(failure["source"].strip()[-400:])


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m tools.fuzz.promise --n 300 --seed 0 [--family NAME] [--json]``; exit status 1
    when a program answered silently or crashed."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", choices=sorted(FAMILIES), default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = fuzz(args.n, args.seed, args.family)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
