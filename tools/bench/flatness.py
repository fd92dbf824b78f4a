"""Where the per-op cost of a long trace goes, phase by phase, from 1k to 100k ops (the
flatness target: the last marginal cost of an op at most 1.2 × the first).

    python -m tools.bench.flatness                 # CPU time, chain of 1000 / 10000 / 100000 ops
    python -m tools.bench.flatness --sizes 1000 10000 --rounds 5 --contenders specfx
    python -m tools.bench.flatness --instructions  # instruction counts (valgrind's callgrind)

One trace is split into phases, each charged only for its own time (a phase inside another
is taken out of the outer one): ``Tracer.trace`` proper, the state snapshot and restore
(``_state.StateKeeper``), torch.fx's code generation (``Graph.python_code``, specfx's
``StructuredCodeGen`` included), ``compile()`` and ``exec`` of the generated source
(``_exec_with_source``), the rest of the ``GraphModule`` construction, specfx's post-passes
(``retraceable``, ``attach``), the garbage collector's young (generation 0 and 1) and full
collections (``gc.callbacks``; in CPU time only), and the rest. Per phase: the marginal µs (or instructions)
per op between successive sizes, and its flatness (last marginal / first).

CPU time: process CPU time, rounds interleaved over sizes and contenders in rotated order,
medians. Instructions: the same phases, each a callgrind dump (``--instructions``; about
10 minutes per 100k-op trace with examples): a phase that grows there does more work per
op; one that grows in CPU time only spends more cycles per instruction (caches, TLB).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from tools import CHECKOUT

CONTENDERS = ("symbolic_trace", "specfx", "specfx+ex")
DEFAULT_SIZES = (1000, 10000, 100000)
_DUMP_SOURCE = """#include <valgrind/callgrind.h>
void specfx_cg_on(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void specfx_cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
void specfx_cg_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
"""


class Phases:
    """Exclusive cost per phase: ``charge`` is called at every phase change with the
    phase that ran until now (a CPU-time clock, or a callgrind dump)."""

    def __init__(self, charge: Callable[[str], None], collections: bool = True) -> None:
        self.charge = charge
        self.collections = collections  # the collector's work as phases of its own
        self.stack = ["rest"]

    def enter(self, phase: str) -> None:
        self.charge(self.stack[-1])
        self.stack.append(phase)

    def leave(self) -> None:
        self.charge(self.stack.pop())

    def _gc(self, event: str, info: Dict[str, Any]) -> None:
        if event == "start":
            self.enter("gc full" if info["generation"] == 2 else "gc young")
        else:
            self.leave()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The phase boundaries, wrapped around specfx's and torch.fx's functions for the block."""
        import torch.fx
        import torch.fx.graph_module as graph_module

        from specfx._capture import state as _state

        from specfx._trace.trace import trace as _trace

        from specfx._capture import tracer as _tracer
        points: List[Tuple[Any, str, str]] = [
            (torch.fx.Tracer, "trace", "Tracer.trace"), (_tracer.SpecTracer, "trace", "Tracer.trace"),
            (_state.StateKeeper, "__init__", "state snapshot"), (_state.StateKeeper, "restore", "state restore"),
            (torch.fx.Graph, "python_code", "codegen"), (graph_module, "_exec_with_source", "compile + exec"),
            (torch.fx.GraphModule, "__init__", "GraphModule (rest)"),
            (_trace, "retraceable", "retraceable"), (_trace, "attach", "attach"),
        ]
        saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in points]
        for owner, name, phase in points:
            setattr(owner, name, self._timed(owner.__dict__[name], phase))
        if self.collections:
            gc.callbacks.append(self._gc)
        try:
            yield
        finally:
            if self.collections:
                gc.callbacks.remove(self._gc)
            for owner, name, original in saved:
                setattr(owner, name, original)

    def _timed(self, function: Callable[..., Any], phase: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.enter(phase)
            try:
                return function(*args, **kwargs)
            finally:
                self.leave()

        return timed


def _calls(sizes: Sequence[int], contenders: Sequence[str]) -> Dict[Tuple[int, str], Callable[[], Any]]:
    from tools.bench.suite import chain_cases, contender_calls

    return {(case.ops or 0, name): call for case in chain_cases(sizes)
            for name, call in contender_calls(case, contenders).items()}


class _CpuClock:
    """Charges the process CPU time since the last phase change to the phase that ran."""

    def __init__(self) -> None:
        self.spent: Dict[str, float] = {}
        self.last = time.process_time()

    def __call__(self, phase: str) -> None:
        now = time.process_time()
        self.spent[phase] = self.spent.get(phase, 0.0) + now - self.last
        self.last = now


def cpu_phases(sizes: Sequence[int], contenders: Sequence[str], rounds: int,
               log: Callable[[str], None]) -> Dict[Tuple[int, str], Dict[str, float]]:
    """Median CPU seconds per phase of one trace, per (size, contender)."""
    samples: Dict[Tuple[int, str], List[Dict[str, float]]] = {}
    calls = _calls(sizes, contenders)
    for call in calls.values():
        call()  # warm-up
    gc.collect()
    gc.freeze()  # the models and what exists now: collections only scan what the traces make
    keys = list(calls)
    for index in range(rounds):
        log(f"round {index + 1} of {rounds} ...")
        shift = index % len(keys)
        for key in keys[shift:] + keys[:shift]:
            clock = _CpuClock()
            gc.collect()
            with Phases(clock).installed():
                clock.last = time.process_time()
                calls[key]()
                clock("rest")
            samples.setdefault(key, []).append(clock.spent)
    return {key: {phase: statistics.median(s.get(phase, 0.0) for s in runs) for phase in {p for s in runs for p in s}}
            for key, runs in samples.items()}


def _dump(helper: ctypes.CDLL, label: str, phase: str) -> None:
    helper.specfx_cg_dump(f"{label}|{phase}".encode())


def _instructions_inside(directory: Path, sizes: Sequence[int], contenders: Sequence[str]) -> None:
    """Runs inside valgrind: one dump per phase change, labelled size|contender|phase."""
    source, library = directory / "specfx_cg_dump.c", directory / "specfx_cg_dump.so"
    source.write_text(_DUMP_SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    helper = ctypes.CDLL(str(library))
    calls = _calls(sizes, contenders)
    for (size, name), call in calls.items():
        if size == sizes[0]:
            call()  # warm-up: one-time costs (imports, caches) are not per-op costs
        gc.collect()
        dump = functools.partial(_dump, helper, f"{size}|{name}")
        # (a dump per collection would write thousands of files: GC stays in the phase it interrupts)
        with Phases(dump, collections=False).installed():
            helper.specfx_cg_on()
            call()
            helper.specfx_cg_dump(f"{size}|{name}|rest".encode())
            helper.specfx_cg_off()


def instruction_phases(sizes: Sequence[int], contenders: Sequence[str],
                       keep: Optional[str]) -> Dict[Tuple[int, str], Dict[str, float]]:
    """Instructions per phase of one trace, per (size, contender), from a valgrind subprocess."""
    directory = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="specfx-flatness-"))
    directory.mkdir(parents=True, exist_ok=True)
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={directory}/callgrind.out.%p", sys.executable, "-m", "tools.bench.flatness",
               "--inside", str(directory), "--sizes", *map(str, sizes), "--contenders", *contenders]
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT), PYTHONHASHSEED="0")
    subprocess.run(command, check=True, env=env, stderr=subprocess.DEVNULL)
    out: Dict[Tuple[int, str], Dict[str, float]] = {}
    for dump in directory.glob("callgrind.out*"):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if label and total:
            size, name, phase = label.group(1).strip().split("|")
            row = out.setdefault((int(size), name), {})
            row[phase] = row.get(phase, 0.0) + int(total.group(1))
    return out


def report(results: Dict[Tuple[int, str], Dict[str, float]], unit: str) -> List[str]:
    """Per contender, a table of each phase's marginal cost per op and its flatness."""
    scale = 1e6 if unit == "µs" else 1.0
    sizes = sorted({size for size, _ in results})
    lines: List[str] = []
    for name in CONTENDERS:
        if not any(n == name for _, n in results):
            continue
        rows = {size: results[(size, name)] for size in sizes}
        phases = sorted({p for row in rows.values() for p in row}, key=lambda p: -rows[sizes[-1]].get(p, 0.0))
        segments = list(zip(sizes, sizes[1:]))
        lines += ["", f"{name}: marginal {unit} per op (Δ phase / Δ N); flatness = last / first", "",
                  "| phase | " + " | ".join(f"Δ {a}-{b}" for a, b in segments) + " | flatness |",
                  "|---" * (len(segments) + 2) + "|"]
        for phase in [*phases, "total"]:
            value = ({size: sum(row.values()) for size, row in rows.items()} if phase == "total"
                     else {size: row.get(phase, 0.0) for size, row in rows.items()})
            marginal = [(value[b] - value[a]) * scale / (b - a) for a, b in segments]
            flat = f"{marginal[-1] / marginal[0]:.3f}" if len(marginal) > 1 and marginal[0] > 0 else "—"
            cells = " | ".join(f"{m:,.2f}" if unit == "µs" else f"{m:,.0f}" for m in marginal)
            lines.append(f"| {'**total**' if phase == 'total' else phase} | {cells} | {flat} |")
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES))
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (CPU time)")
    parser.add_argument("--instructions", action="store_true", help="instruction counts under callgrind")
    parser.add_argument("--keep", default=None, help="directory for callgrind's output files (kept)")
    parser.add_argument("--inside", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    sizes = sorted(args.sizes)
    if args.inside:
        _instructions_inside(Path(args.inside), sizes, args.contenders)
        return 0
    if args.instructions:
        print("\n".join(report(instruction_phases(sizes, args.contenders, args.keep), "instructions")))
    else:
        results = cpu_phases(sizes, args.contenders, args.rounds,
                             log=lambda message: print(message, file=sys.stderr, flush=True))
        print("\n".join(report(results, "µs")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
