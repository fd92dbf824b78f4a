"""Cost of checking a calibration set: ``specfx.coverage`` of N batches against N
forwards of the same graph, and the traces ``Specializer.fit`` makes per variant.

    python -m tools.bench.calibration_cost [--batches 64] [--rounds 5] [--workload gated]

Coverage target: at most N forwards of the graph + 5 %. Each figure is the minimum
over interleaved rounds of the CPU time (``time.process_time``) of the whole set, under
``torch.no_grad()`` as calibration runs; the ratio is coverage / forwards.
"""

from __future__ import annotations

import argparse
import functools
import time
import warnings
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

import specfx
from specfx import Policy
from specfx._trace.coverage import as_call
from tools.bench.models import BertLike, GatedMLP, SmallMLP


def _tokens(size: int, length: int, seed: int) -> Dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(size, length)
    mask[0, length // 2:] = 0
    return {"input_ids": torch.randint(0, 30522, (size, length), generator=generator), "attention_mask": mask}


def workloads(count: int) -> List[Tuple[str, nn.Module, Policy, List[Any]]]:
    """(name, model, policy, batches): guards on data throughout the model (BertLike under
    SHAPES reads every layer's sizes), one guard on data early (GatedMLP), guards on input
    metadata only (SmallMLP: none of the model runs)."""
    torch.manual_seed(0)
    return [
        ("bert-like-4, SHAPES", BertLike(layers=4, hidden=128, heads=4, intermediate=512).eval(),
         Policy(shapes=True), [_tokens(8, 64, seed) for seed in range(count)]),
        ("gated-mlp, BOOL", GatedMLP().eval(), Policy(bool=True),
         [torch.randn(256, 16, generator=torch.Generator().manual_seed(seed)) + 3 for seed in range(count)]),
        ("small-mlp, BOOL on a shape", SmallMLP().eval(), Policy(bool=True),
         [torch.randn(64, 32, generator=torch.Generator().manual_seed(seed)) for seed in range(count)]),
    ]


def _min_time(calls: Dict[str, Callable[[], Any]], rounds: int) -> Dict[str, float]:
    best = {name: float("inf") for name in calls}
    for index in range(rounds):
        order = list(calls.items())
        for name, call in order[index % len(order):] + order[:index % len(order)]:
            start = time.process_time()
            call()
            best[name] = min(best[name], time.process_time() - start)
    return best


def _forwards(gm: torch.fx.GraphModule, calls: List[Tuple[Any, Any]]) -> None:
    for args, kwargs in calls:
        gm(*args, **kwargs)


def _coverage(gm: torch.fx.GraphModule, batches: List[Any]) -> None:
    assert specfx.coverage(gm, batches, progress=False).covered


def coverage_cost(rounds: int, count: int, only: str = "") -> List[Dict[str, Any]]:
    rows = []
    for name, model, policy, batches in workloads(count):
        if only not in name:
            continue
        example_args, example_kwargs = as_call(batches[0])
        gm = specfx.trace(model, example_args, example_kwargs, policy=policy)
        calls = [as_call(batch) for batch in batches]
        with torch.no_grad():
            best = _min_time({"forwards": functools.partial(_forwards, gm, calls),
                              "coverage": functools.partial(_coverage, gm, batches)}, rounds)
        rows.append({"workload": name, "batches": count, "guards": len(gm.specializations),
                     "forwards_ms": best["forwards"] * 1e3, "coverage_ms": best["coverage"] * 1e3,
                     "ratio": best["coverage"] / best["forwards"]})
    return rows


def _counting(self: Any, original: Callable[..., Any], traced: List[int], args: Any, kwargs: Any) -> Any:
    traced.append(1)  # a trace happens here, whoever asked for it
    return original(self, args, kwargs)


def fit_traces() -> List[Dict[str, Any]]:
    """Traces per variant of ``fit`` on mixed sets (a trace is counted where it happens)."""
    torch.manual_seed(0)
    sets = [
        ("bert-like-2, SHAPES, 3 lengths x 2 batch sizes", BertLike(layers=2, hidden=64, heads=2, intermediate=128),
         Policy(shapes=True), [_tokens(size, length, seed) for seed, (size, length) in
                               enumerate([(2, 16), (4, 32), (2, 48), (4, 16), (2, 32), (4, 48)] * 4)]),
        ("gated-mlp, BOOL, both signs", GatedMLP(), Policy(bool=True),
         [torch.randn(8, 16) + (3 if seed % 3 else -3) for seed in range(24)]),
    ]
    rows = []
    for name, model, policy, batches in sets:
        model.eval()
        traced: List[int] = []
        original = specfx.Specializer._trace
        specfx.Specializer._trace = functools.partialmethod(_counting, original, traced)  # type: ignore[method-assign,assignment]
        try:
            start = time.process_time()
            spec = specfx.Specializer(model, policy).fit(batches)
            elapsed = time.process_time() - start
        finally:
            specfx.Specializer._trace = original  # type: ignore[method-assign]
        with torch.no_grad():
            for batch in batches:
                args, kwargs = as_call(batch)
                spec(*args, **kwargs)
        rows.append({"set": name, "batches": len(batches), "variants": len(spec.variants), "traces": len(traced),
                     "retraces_after": spec.stats.retraces - len(spec.variants), "fit_ms": elapsed * 1e3})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=64, help="batches per set (default 64)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--workload", default="", help="only the coverage workloads whose name contains this")
    options = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print("| workload | batches | guards | N forwards (ms) | coverage (ms) | coverage / forwards |")
    print("|---|---|---|---|---|---|")
    for row in coverage_cost(options.rounds, options.batches, options.workload):
        print(f"| {row['workload']} | {row['batches']} | {row['guards']} | {row['forwards_ms']:.1f} | "
              f"{row['coverage_ms']:.1f} | {row['ratio']:.3f} |")
    print()
    print("| set | batches | variants | traces | retraces afterwards | fit (ms) |")
    print("|---|---|---|---|---|---|")
    for row in fit_traces():
        print(f"| {row['set']} | {row['batches']} | {row['variants']} | {row['traces']} | {row['retraces_after']} | "
              f"{row['fit_ms']:.0f} |")


if __name__ == "__main__":
    main()
