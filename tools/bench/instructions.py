"""Instruction counts of a trace (valgrind's callgrind): repeatable before/after numbers
on a machine too busy for wall-clock A/B runs.

    python -m tools.bench.instructions [MODEL ...] [--reps N]  # runs itself under valgrind
    python -m tools.bench.instructions --gc-off res-norm-200   # the same with the collector off

Each contender (eager forward, ``symbolic_trace``, ``specfx.trace`` without and with
examples under ``Policy(Specialize.ALL)``) is warmed up, then called ``--reps`` times
with callgrind collecting only around those calls (``--instr-atstart=no`` and client
requests from a tiny C helper compiled on first use: the interpreter's and torch's
start-up are not instrumented). Reported: instructions per call, and the trace-time
targets' ratios on instructions (specfx+ex / (symbolic_trace + eager), specfx / symbolic_trace).
The per-function profile of the last contender stays in the callgrind output files
(``--keep DIR``; read them with ``callgrind_annotate``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from tools import CHECKOUT

CONTENDERS = ("eager", "symbolic_trace", "specfx", "specfx+ex")
_HELPER_SOURCE = """#include <valgrind/callgrind.h>
void specfx_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void specfx_cg_stop(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def _helper(directory: Path) -> ctypes.CDLL:
    """The client-request helper, compiled into ``directory`` (needs gcc and valgrind's headers)."""
    source, library = directory / "specfx_cg.c", directory / "specfx_cg.so"
    if not library.exists():
        source.write_text(_HELPER_SOURCE)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)], check=True)
    return ctypes.CDLL(str(library))


def _measured(names: Sequence[str], reps: int, directory: Path, gc_off: bool) -> None:
    """Runs inside valgrind: one dump per (model, contender)."""
    import torch

    from tools.bench.suite import build_cases, contender_calls

    torch.set_num_threads(1)
    helper = _helper(directory)
    for case in (c for c in build_cases((1000, 10000)) if c.name in names):
        calls = contender_calls(case, CONTENDERS)
        for name, call in calls.items():
            call()  # warm-up: one-time costs (imports, caches) are not per-trace costs
            gc.collect()
            if gc_off:
                gc.disable()
            helper.specfx_cg_start()
            for _ in range(reps):
                call()
            helper.specfx_cg_stop(f"{case.name}|{name}".encode())
            gc.enable()


def _totals(directory: Path) -> Dict[str, int]:
    out = {}
    for dump in directory.glob("callgrind.out*"):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if label and total:
            out[label.group(1).strip()] = int(total.group(1))
    return out


def run(names: Sequence[str], reps: int, gc_off: bool, keep: Optional[str],
        log: Callable[[str], None] = print) -> Dict[str, Dict[str, float]]:
    """Instructions per call of each contender on each model (in a valgrind subprocess)."""
    directory = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="specfx-callgrind-"))
    directory.mkdir(parents=True, exist_ok=True)
    _helper(directory)
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={directory}/callgrind.out.%p",
               sys.executable, "-m", "tools.bench.instructions", "--inside", str(directory), "--reps", str(reps),
               *(["--gc-off"] if gc_off else []), *names]
    # string hashing seeds set and dict orders, which move GC and cache work between runs
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT), PYTHONHASHSEED="0")
    subprocess.run(command, check=True, env=env, stderr=subprocess.DEVNULL)
    results: Dict[str, Dict[str, float]] = {}
    for label, total in _totals(directory).items():
        model, contender = label.split("|")
        results.setdefault(model, {})[contender] = total / reps
    return results


def report(results: Dict[str, Dict[str, float]]) -> List[str]:
    lines = ["| model | eager | symbolic_trace | specfx (no ex.) | specfx (ex., ALL) | ex. / (st + eager) | no ex. / st |",
             "|---|---|---|---|---|---|---|"]
    for model, row in results.items():
        m = {k: row.get(k, float("nan")) for k in CONTENDERS}
        lines.append(f"| {model} | " + " | ".join(f"{m[k] / 1e6:.1f} M" for k in CONTENDERS)
                     + f" | {m['specfx+ex'] / (m['symbolic_trace'] + m['eager']):.3f}"
                     + f" | {m['specfx'] / m['symbolic_trace']:.3f} |")
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["res-norm-200", "mlp-seq-100", "resnet50", "bert12"])
    parser.add_argument("--reps", type=int, default=2, help="calls per contender inside the measurement")
    parser.add_argument("--gc-off", action="store_true", help="disable the garbage collector during the calls")
    parser.add_argument("--keep", default=None, help="directory for callgrind's output files (kept)")
    parser.add_argument("--inside", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inside:
        _measured(args.models, args.reps, Path(args.inside), args.gc_off)
        return 0
    print("\n".join(report(run(args.models, args.reps, args.gc_off, args.keep))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
