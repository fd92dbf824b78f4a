"""Forward-time cost of specfx guards: the same traced graph with guards
(the default) and with ``guards=False``, on a 50-layer CNN and a 12-layer
transformer encoder, interleaved runs on CPU, medians reported.

    python -m tools.bench.guard_overhead [--repeats 15] [--json]

Timings are process CPU time with one torch thread (steadier than wall time on a
shared machine). Both models take decisions in every layer (unpacking chunks, a shape
predicate, an optional mask), so each graph carries dozens of guards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch
from torch import nn

import specfx
from tools.bench.models import GuardedCNN, GuardedTransformer
from specfx import Policy


def _time_ms(fn: Callable[[], object]) -> float:
    # Process CPU time with one torch thread: on a shared machine it is far steadier than
    # wall time, and a forward's cost is its CPU time.
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def measure(name: str, model: nn.Module, example: tuple, repeats: int) -> Dict[str, float]:
    """Median forward ms of the guarded and unguarded graphs, interleaved."""
    policy = Policy(bool=True)
    guarded = specfx.trace(model, example, policy=policy)
    unguarded = specfx.trace(model, example, policy=policy, guards=False)
    guards = sum(1 for node in guarded.graph.nodes if getattr(node.target, "__name__", "").startswith("guard_"))
    # A second unguarded copy gives the noise floor: its ratio to the first should be 1.
    control = specfx.trace(model, example, policy=policy, guards=False)
    runs: Dict[str, List[float]] = {"guarded": [], "unguarded": [], "control": []}
    graphs = {"guarded": guarded, "unguarded": unguarded, "control": control}
    with torch.no_grad():
        for graph in graphs.values():
            graph(*example)  # warm-up
        for round_ in range(repeats):  # interleaved, order rotated, so noise hits all alike
            names = list(graphs)
            names = names[round_ % 3:] + names[: round_ % 3]
            for key in names:
                runs[key].append(_time_ms(lambda graph=graphs[key]: graph(*example)))
    medians = {key: statistics.median(times) for key, times in runs.items()}
    # The guards' own cost, measured directly: timing noise between two whole forwards on
    # a shared machine is larger than what 100 guard calls cost.
    estimate_ms = guard_calls_ms(guarded, example)
    return {"model": name, "guards": guards, "guarded_ms": round(medians["guarded"], 3),
            "unguarded_ms": round(medians["unguarded"], 3),
            "ratio": round(medians["guarded"] / medians["unguarded"], 4),
            "noise_ratio": round(medians["control"] / medians["unguarded"], 4),
            "guard_calls_ms": round(estimate_ms, 4),
            "guard_share": round(estimate_ms / medians["unguarded"], 5)}


def guard_calls_ms(graph: torch.fx.GraphModule, example: tuple, repeats: int = 200) -> float:
    """CPU ms that one forward spends inside its guard calls, with the argument values
    of a real run (captured with an fx.Interpreter); the minimum over 5 batches of
    ``repeats`` forwards' worth of guard calls (the batch least disturbed by other processes)."""
    captured: list = []

    class Capture(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):  # type: ignore[override]
            if getattr(target, "__module__", None) == "specfx":
                captured.append((target, args))
            return super().call_function(target, args, kwargs)

    with torch.no_grad():
        Capture(graph).run(*example)
    batches = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeats):
            for target, args in captured:
                target(*args)
        batches.append((time.process_time() - start) * 1000 / repeats)
    return min(batches)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = [
        measure("50-layer CNN", GuardedCNN().eval(), (torch.randn(2, 3, 32, 32),), args.repeats),
        measure("12-layer transformer", GuardedTransformer().eval(),
                (torch.randn(2, 64, 256), torch.ones(2, 64)), args.repeats),
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'model':<22} {'guards':>6} {'guarded ms':>11} {'unguarded ms':>13} {'ratio':>7} {'A/A noise':>9}"
          f" {'guard calls ms':>15} {'share':>8}")
    for row in rows:
        print(f"{row['model']:<22} {row['guards']:>6} {row['guarded_ms']:>11.3f} "
              f"{row['unguarded_ms']:>13.3f} {row['ratio']:>7.4f} {row['noise_ratio']:>9.4f}"
              f" {row['guard_calls_ms']:>15.4f} {row['guard_share']:>8.3%}")
    print("ratio = guarded / guards=False forward time (medians, interleaved); A/A noise = a second "
          "guards=False copy / the first;\nguard calls = CPU time one forward spends inside its guards "
          "(called directly with that forward's arguments); share = that / the unguarded forward")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
