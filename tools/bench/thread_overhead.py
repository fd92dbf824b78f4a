"""What a trace costs code running in another thread: ``isinstance`` and
``is_fx_tracing()`` timed in a second thread while a trace is paused inside the
model's forward (so the two threads do not compete for the GIL), against the
same loop in the same kind of thread with no trace running. Rounds alternate
(no trace, during a trace, ...), each timed in the thread's own CPU time (a busy
machine delays a thread but does not bill it); the table shows medians and the
ratio's minimum.

    python -m tools.bench.thread_overhead [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Callable, Dict, List

import torch
import torch.fx._symbolic_trace as fx_trace

import specfx

CALLS = 200_000


def _isinstance_int() -> float:
    value, start = 1, time.thread_time()
    for _ in range(CALLS):
        isinstance(value, int)
    return time.thread_time() - start


def _isinstance_tensor() -> float:
    value, tensor, start = 1, torch.Tensor, time.thread_time()
    for _ in range(CALLS):
        isinstance(value, tensor)
    return time.thread_time() - start


def _is_fx_tracing() -> float:
    is_fx_tracing, start = fx_trace.is_fx_tracing, time.thread_time()
    for _ in range(CALLS):
        is_fx_tracing()
    return time.thread_time() - start


def _empty() -> float:  # the loop itself, subtracted from the others
    start = time.thread_time()
    for _ in range(CALLS):
        pass
    return time.thread_time() - start


LOOPS: Dict[str, Callable[[], float]] = {
    "isinstance(1, int)": _isinstance_int,
    "isinstance(1, torch.Tensor)": _isinstance_tensor,
    "is_fx_tracing()": _is_fx_tracing,
}


def _in_thread(loop: Callable[[], float], during_trace: bool) -> float:
    """``loop`` run in a new thread, alone or while this thread's trace waits in forward."""
    inside, done = threading.Barrier(2), threading.Barrier(2)
    result: List[float] = []

    def other() -> None:
        inside.wait()
        result.append(loop() - _empty())
        done.wait()

    class Paused(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inside.wait()
            done.wait()
            return x + 1

    thread = threading.Thread(target=other)
    thread.start()
    if during_trace:
        specfx.trace(Paused(), (torch.ones(2),))
    else:
        inside.wait()
        done.wait()
    thread.join()
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    fx_trace.is_fx_tracing_warning()  # its one-time log line out of the way
    print(f"{'loop (other thread)':30s} {'no trace':>9s} {'during':>9s} {'ratio':>6s} {'min':>6s}   ({rounds} rounds)")
    for name, loop in LOOPS.items():
        alone, during, ratios = [], [], []
        for _ in range(rounds):
            alone.append(_in_thread(loop, False))
            during.append(_in_thread(loop, True))
            ratios.append(during[-1] / alone[-1])
        a, d = statistics.median(alone), statistics.median(during)
        print(f"{name:30s} {a / CALLS * 1e9:7.1f}ns {d / CALLS * 1e9:7.1f}ns {d / a:6.2f} {min(ratios):6.2f}")


if __name__ == "__main__":
    main()
