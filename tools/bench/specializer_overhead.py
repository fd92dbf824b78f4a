"""Cost of ``specfx.Specializer``: steady-state overhead of the wrapper over
calling the chosen GraphModule directly, and a guard-changing workload
compared with ``torch.compile(backend="eager")`` recompiling.

    python -m tools.bench.specializer_overhead [--repeats 200] [--json]

Timings are medians of interleaved calls (wrapper and direct alternate), so
machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Dict, List

import torch
from torch import nn

import specfx
from tools.bench.models import GatedMLP, MultiInput, SmallMLP, SmallResNet
from specfx import Policy


def _interleaved(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> Dict[str, float]:
    times: Dict[str, List[float]] = {"a": [], "b": []}
    for index in range(repeats):
        order = (("a", a), ("b", b)) if index % 2 == 0 else (("b", b), ("a", a))
        for key, fn in order:
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) * 1e6 for key, values in times.items()}


def steady_state(name: str, model: nn.Module, x: torch.Tensor, policy: Policy, repeats: int) -> Dict[str, Any]:
    """Wrapper vs. the chosen variant called directly, in microseconds."""
    spec = specfx.Specializer(model, policy)
    with torch.no_grad():
        spec(x)
        variant = spec.variants[0]
        for _ in range(10):
            spec(x), variant(x)
        medians = _interleaved(lambda: spec(x), lambda: variant(x), repeats)
    return {"model": name, "wrapper_us": round(medians["a"], 2), "direct_us": round(medians["b"], 2),
            "overhead": round(medians["a"] / medians["b"] - 1, 4),
            "prologue_guards": 0 if spec._all[0].prologue is None else sum(
                1 for n in spec._all[0].prologue.graph.nodes if n.op == "call_function"
                and n.target.__module__ == "specfx")}


def prologue_cost(policy: Policy, repeats: int = 2000) -> Dict[str, Any]:
    """CPU µs of one prologue call (the check that picks a variant) on four inputs that
    each carry a decision on their shape, and that per guarded input: the minimum over
    5 batches of ``repeats`` calls. ``Policy(bool=True)`` guards the predicate
    ``x.shape[0] > 1`` (shape read, compare, guard); ``shapes`` guards ``x.size(0)``."""
    torch.manual_seed(0)
    spec = specfx.Specializer(MultiInput(), policy)
    wide = [torch.randn(2, 3) for _ in range(4)]
    narrow = [torch.randn(1, 3)] + wide[1:]  # a second variant, so prologues choose between them
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the size-1 example is degenerate on purpose
        spec(*wide), spec(*narrow)
    check = spec._all[0].check
    if check is None:
        raise RuntimeError("the first variant has no prologue")
    batches = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeats):
            check(*wide)
        batches.append((time.process_time() - start) * 1e6 / repeats)
    guarded = sum(1 for n in spec._all[0].prologue.graph.nodes if n.op == "placeholder" and n.users)
    return {"prologue_us": min(batches), "guarded_inputs": guarded, "us_per_input": min(batches) / guarded,
            "policy": repr(policy)}


def guard_changing(repeats: int) -> Dict[str, Any]:
    """Alternate inputs that take the two paths of Gated: Specializer vs torch.compile(eager)."""
    torch.manual_seed(0)
    model = GatedMLP().eval()
    xs = [torch.randn(8, 16) for _ in range(64)]
    pos = next(x for x in xs if model.lin(x).sum() > 0)
    neg = next(x for x in xs if model.lin(x).sum() <= 0)
    workload = [pos, neg] * (repeats // 2)
    result: Dict[str, Any] = {"calls": len(workload)}
    with torch.no_grad():
        start = time.perf_counter()
        spec = specfx.Specializer(model, Policy(bool=True))
        for x in workload:
            spec(x)
        result["specializer_total_ms"] = round((time.perf_counter() - start) * 1e3, 2)
        result["specializer_variants"] = len(spec.variants)
        try:
            from torch import _dynamo

            _dynamo.reset()
            compiled = torch.compile(model, backend="eager")
            start = time.perf_counter()
            for x in workload:
                compiled(x)
            result["compile_eager_total_ms"] = round((time.perf_counter() - start) * 1e3, 2)
            steady = _interleaved(lambda: spec(pos), lambda: compiled(pos), max(50, repeats))
            result["steady_us"] = {"specializer": round(steady["a"], 2), "compile_eager": round(steady["b"], 2)}
        except Exception as error:  # torch.compile unavailable on this platform
            result["compile_eager_total_ms"] = f"fails: {type(error).__name__}: {str(error).splitlines()[0]}"
    return result


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    # One torch thread: on a shared 2-core machine, OpenMP waits make a 20 us forward take ms.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = [
        steady_state("small MLP (batch 8)", SmallMLP().eval(), torch.randn(8, 32), Policy(bool=True), args.repeats),
        steady_state("ResNet-like (16 bottlenecks)", SmallResNet().eval(), torch.randn(1, 3, 32, 32),
                     Policy(bool=True), max(20, args.repeats // 10)),
    ]
    prologues = [prologue_cost(Policy(bool=True)), prologue_cost(Policy(shapes=True))]
    changing = guard_changing(args.repeats)
    if args.json:
        print(json.dumps({"steady_state": rows, "prologue": prologues, "guard_changing": changing}, indent=2))
        return 0
    print(f"{'model':<30} {'wrapper us':>11} {'direct us':>10} {'overhead':>9} {'prologue guards':>16}")
    for row in rows:
        print(f"{row['model']:<30} {row['wrapper_us']:>11.1f} {row['direct_us']:>10.1f} "
              f"{row['overhead']:>8.1%} {row['prologue_guards']:>16}")
    print("\nprologue (chooses among variants; CPU time, minimum of 5 batches):")
    for row in prologues:
        print(f"  {row['policy']}: {row['prologue_us']:.2f} us for {row['guarded_inputs']} guarded inputs, "
              f"{row['us_per_input']:.2f} us per input (target <= 2)")
    print("\nguard-changing workload (alternating data-dependent paths):")
    for key, value in changing.items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
