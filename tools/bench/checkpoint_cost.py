"""Cost of a Specializer's checkpoint (what a variant saves before each attempt so a
failed guard on data can put it back): for variants that write nothing, a
train-mode BatchNorm, and a parameter written through ``.data``, before a guard
on data.

    python -m tools.bench.checkpoint_cost [--rounds 25]

Each figure is the minimum over interleaved rounds of the CPU time per call
(``time.process_time``), so other processes on the machine inflate it least.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any, Callable, Dict

import torch
from torch import nn

import specfx
from specfx import Policy
from specfx._trace.guard_runs import Checkpoint


class LinearNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.fc(x))
        return y * 2 if y.sum() > 0 else y - 1


class ScalesItsBias(LinearNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc.bias.data.mul_(1.0)
        return super().forward(x)


def measure(model: nn.Module, rounds: int) -> Dict[str, float]:
    x = torch.randn(32, 64)
    spec = specfx.Specializer(model, Policy(bool=True))
    spec(x)
    (variant,) = spec._all
    calls: Dict[str, Callable[[], Any]] = {
        "call": lambda: spec(x),
        "checkpoint": lambda: Checkpoint(variant.writes, variant.saved_paths, (x,), {}, variant.graph)
        if variant.writes else None,
    }
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for key, call in calls.items():
            start = time.process_time()
            for _ in range(200):
                call()
            best[key] = min(best[key], (time.process_time() - start) / 200 * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    rounds = parser.parse_args().rounds
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name, model in (("eval, nothing written", LinearNorm().eval()), ("train-mode BatchNorm", LinearNorm().train()),
                        ("eval, .data write to a bias", ScalesItsBias().eval())):
        best = measure(model, rounds)
        print(f"{name:30s} call {best['call']:7.1f} us   checkpoint {best['checkpoint']:6.1f} us")


if __name__ == "__main__":
    main()
