"""What a trace costs code running in another thread: ``isinstance`` and
``is_fx_tracing()`` timed in a second thread while a trace is paused inside the
model's forward (so the two threads do not compete for the GIL), against the same
loop with no trace running.

    python -m tools.thread_overhead
"""

from __future__ import annotations

import threading
import timeit
from typing import Callable, Dict

import torch
import torch.fx._symbolic_trace as fx_trace

import specfx

CALLS = 1_000_000


def _loops() -> Dict[str, Callable[[], float]]:
    value = 1
    return {
        "isinstance(1, int)": lambda: min(timeit.repeat(lambda: isinstance(value, int), number=CALLS, repeat=5)),
        "isinstance(1, torch.Tensor)": lambda: min(
            timeit.repeat(lambda: isinstance(value, torch.Tensor), number=CALLS, repeat=5)),
        "is_fx_tracing()": lambda: min(timeit.repeat(fx_trace.is_fx_tracing, number=CALLS // 10, repeat=5)) * 10,
    }


def _during_trace(loop: Callable[[], float]) -> float:
    inside, done = threading.Barrier(2), threading.Barrier(2)

    class Paused(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inside.wait()
            done.wait()
            return x + 1

    result: Dict[str, float] = {}

    def other() -> None:
        inside.wait()
        result["seconds"] = loop()
        done.wait()

    thread = threading.Thread(target=other)
    thread.start()
    specfx.trace(Paused(), (torch.ones(2),))
    thread.join()
    return result["seconds"]


def main() -> None:
    fx_trace.is_fx_tracing_warning()  # its one-time log line out of the way
    for name, loop in _loops().items():
        before = loop()
        during = _during_trace(loop)
        print(f"{name:30s} no trace {before / CALLS * 1e9:6.1f} ns   during a trace, other thread "
              f"{during / CALLS * 1e9:6.1f} ns   ({during / before:.2f}x)")


if __name__ == "__main__":
    main()
