"""Trace-time benchmarks: specfx beside torch.fx.symbolic_trace, torch.jit.trace,
make_fx (real and symbolic) and torch.export, in one process, on the README's
seed example, a ResNet-50-like CNN, a 12-layer BERT-like encoder and a chain
of N = 10 ... 10000 ops (blocks with a guarded unpack each, for scaling).

    python -m tools.bench.suite                        # full run (about 15 minutes on 2 busy cores)
    python -m tools.bench.suite --quick                # smoke run (under a minute)
    python -m tools.bench.suite --json                 # the same results as JSON on stdout
    python -m tools.bench.suite --write-docs           # also write docs/benchmarks.md
    python -m tools.bench.suite --profile [MODEL ...]  # differential cProfile against symbolic_trace (+ eager)
    python -m tools.bench.suite --memory [MODEL ...]   # only the peak-memory rows (default: every memory model)
    python -m tools.bench.suite --scaling [N ...]      # only the chain's per-op cost and flatness (a few minutes)

Method: every contender is warmed up; then each round calls every contender
once, in an order rotated per round, with ``gc.collect()`` (of what the calls
made: older objects are frozen) before each sample, so load from other
processes hits all alike. Cheap contenders get more rounds than slow ones;
a call under 2 ms is repeated within its sample. A contender whose warm-up
took longer than ``--slow`` seconds is not repeated: its warm-up is its one
sample (one-time costs were paid untimed at the start). Times are process CPU
time by default (``--clock wall`` for elapsed time) with one torch thread
(``--threads``): on a shared machine both keep other processes out of the
numbers. Models are in eval mode; traces run with autograd enabled, as a
user's call would; graph runtimes run under ``torch.no_grad()``; peak memory
is measured in separate calls. The chains from which the per-op cost must be flat
(N = 1000 ... 100000) are timed in the same rounds, every call sampled, so that the
flatness compares sizes measured under the same machine load.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import dataclasses
import datetime
import functools
import gc
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import specfx
from tools import CHECKOUT
from tools.bench.models import BertLike, Chain, ResidualNormBlocks, ResNetLike, TestModule, sequential_mlp_blocks
from tools.bench.guard_overhead import guard_calls_ms
from tools.bench.specializer_overhead import prologue_cost
from specfx import Policy, Specialize

DOCS_PATH = CHECKOUT / "docs" / "benchmarks.md"


# -- cases and contenders ------------------------------------------------------------------

CONTENDERS = ("eager", "symbolic_trace", "specfx", "specfx+ex", "jit.trace", "make_fx real",
              "make_fx symbolic", "export")
LABELS = {"eager": "eager fwd", "specfx": "specfx (no ex.)", "specfx+ex": "specfx (ex., ALL)"}
PEERS = ("jit.trace", "make_fx real", "make_fx symbolic", "export")
# The trace-time targets (with examples ≤ 1.15 × (symbolic_trace + eager), without ≤ 1.05 ×
# symbolic_trace) are measured on these: two deep models of small tensors (where per-op
# overhead shows) and the ResNet-50 and BERT layouts (where large ops hide it).
TARGET_MODELS = ("res-norm-200", "mlp-seq-100", "resnet50", "bert12")
GUARD_MODELS = ("resnet50", "bert12")
MEMORY_MODELS = TARGET_MODELS + ("chain-1000",)  # the chain: a guard per five ops
# With examples, specfx traces under the widest policy, Policy(Specialize.ALL): every decision
# the code takes is granted, recorded and guarded, so the targets price the most work a trace does.
POLICY = Policy(Specialize.ALL)


@dataclass
class Case:
    name: str
    description: str
    model: nn.Module
    args: Tuple[Any, ...]
    ops: Optional[int] = None  # the chain's N


def build_cases(chain_sizes: Sequence[int]) -> List[Case]:
    torch.manual_seed(0)
    ids = torch.randint(0, 30522, (2, 64))
    cases = [
        Case("seed", "README TestModule, x 1x4x10x10", TestModule(), (torch.randn(1, 4, 10, 10),)),
        Case("res-norm-200", "200 residual blocks LayerNorm → Linear(32, 32) → GELU, x 4x32",
             ResidualNormBlocks(200, 32).eval(), (torch.randn(4, 32),)),
        Case("mlp-seq-100", "nn.Sequential of 100 blocks Linear(64, 64) → ReLU → Linear → ReLU → add → "
             "LayerNorm, x 8x64", sequential_mlp_blocks(100, 64).eval(), (torch.randn(8, 64),)),
        Case("resnet50", "ResNet-50 layout, width 32, BatchNorm, x 1x3x64x64", ResNetLike().eval(),
             (torch.randn(1, 3, 64, 64),)),
        Case("bert12", "12 layers, hidden 256, 4 heads, ids 2x64 + mask", BertLike().eval(),
             (ids, torch.ones(2, 64))),
    ]
    return cases + chain_cases(chain_sizes)


def chain_cases(sizes: Sequence[int]) -> List[Case]:
    """The chain of N ops for each N (the scaling rows)."""
    return [Case(f"chain-{n}", f"{n // 5} blocks of 5 ops (chunk/unpack, relu, cat), x of 8", Chain(n),
                 (torch.randn(8),), ops=n) for n in sizes]


def checked_trace(case: Case) -> torch.fx.GraphModule:
    """``case`` traced with examples under ``POLICY``, checked against eager."""
    gm = specfx.trace(case.model, case.args, policy=POLICY)
    with torch.no_grad():
        if not torch.allclose(gm(*case.args), case.model(*case.args)):
            raise RuntimeError(f"{case.name}: the specfx graph differs from eager")
    return gm


def contender_calls(case: Case, names: Sequence[str]) -> Dict[str, Callable[[], Any]]:
    model, args, policy = case.model, case.args, POLICY
    calls = {
        "eager": lambda: model(*args),
        "symbolic_trace": lambda: torch.fx.symbolic_trace(model),
        "specfx": lambda: specfx.trace(model),
        "specfx+ex": lambda: specfx.trace(model, args, policy=policy),
        "jit.trace": lambda: torch.jit.trace(model, args),
        "make_fx real": lambda: make_fx(model, tracing_mode="real")(*args),
        # parameters are real tensors: without the flag make_fx symbolic rejects every module with weights
        "make_fx symbolic": lambda: make_fx(
            model, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*args),
        "export": lambda: torch.export.export(model, args),
    }
    return {name: calls[name] for name in names}


# -- measuring -------------------------------------------------------------------------------


@dataclass
class Timing:
    samples: List[float] = field(default_factory=list)  # ms per call
    error: Optional[str] = None

    def summary(self) -> Dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        return {"median_ms": statistics.median(self.samples), "min_ms": min(self.samples),
                "max_ms": max(self.samples), "n": len(self.samples),
                "samples_ms": [round(sample, 4) for sample in self.samples]}


CLOCKS: Dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
CLOCK_NAMES = {"cpu": "process CPU time (time.process_time)", "wall": "wall-clock time (time.perf_counter)"}


def _ms_per_call(call: Callable[[], Any], repeat: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(repeat):
        call()
    return (clock() - start) * 1000 / repeat


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160] if text else ''}"


def measure(calls: Dict[str, Callable[[], Any]], settings: "Settings", budget_s: float) -> Dict[str, Timing]:
    """Warm every contender up, then run rounds in rotated order. Each contender
    gets as many samples as fit in ``budget_s`` (between ``min_rounds`` and
    ``max_rounds``) and takes part in that many of the first rounds, so the
    cheap ones (whose ratios matter most) get the most samples."""
    timings = {name: Timing() for name in calls}
    clock = CLOCKS[settings.clock]
    repeat: Dict[str, int] = {}
    samples: Dict[str, int] = {}
    for name, call in calls.items():
        try:
            warm = _ms_per_call(call, 1, clock)
            if warm < 500:
                warm = _ms_per_call(call, 1, clock)
        except Exception as error:  # a peer that cannot trace this model
            timings[name].error = first_line(error)
            continue
        if warm > settings.slow_s * 1000:
            timings[name].samples.append(warm)  # its warm-up is its one sample
            continue
        repeat[name] = max(1, min(50, math.ceil(2.0 / max(warm, 1e-3))))
        fit = int(budget_s * 1000 / (repeat[name] * warm))
        samples[name] = max(settings.min_rounds, min(settings.max_rounds, fit))
    names = list(samples)
    gc.collect()
    gc.freeze()  # what exists now is never garbage: later collections only scan what the calls made
    for index in range(max(samples.values(), default=0)):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            if index >= samples[name] or timings[name].error:
                continue
            gc.collect()
            try:
                timings[name].samples.append(_ms_per_call(calls[name], repeat[name], clock))
            except Exception as error:  # pragma: no cover - a peer that fails only sometimes
                timings[name].error = first_line(error)
    return timings


class _MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _heap_probe() -> Optional[Callable[[], int]]:
    """Bytes the C heap has handed out (glibc ``mallinfo2``: arenas + mmap'd
    blocks), which includes tensor storage; None where glibc is not there."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo

    def in_use() -> int:
        info = mallinfo2()
        return info.uordblks + info.hblkhd

    return in_use


class _HeapSampler(threading.Thread):
    """The peak of ``probe()`` while running, sampled every half millisecond
    (and whenever the traced code releases the GIL, as torch ops do)."""

    def __init__(self, probe: Callable[[], int]) -> None:
        super().__init__(daemon=True)
        self.probe = probe
        self.base = self.peak = probe()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, self.probe())
            time.sleep(0.0005)


def peak_memory(call: Callable[[], Any], repeat: int = 2) -> Dict[str, Optional[float]]:
    """MB allocated at the peak of one call, above what was allocated before it:
    Python objects (tracemalloc: graphs, proxies, records; not tensor storage,
    which torch allocates in C++) and the whole C heap (sampled, includes tensors).
    Each is the least of ``repeat`` calls: process-wide tables grow now and then, at
    whichever call crosses a threshold (Python's table of interned strings, which
    compile() fills with the generated code's names, doubles at ~4 MB on these
    models), which is not what a trace needs."""
    result: Dict[str, Optional[float]] = {"tracemalloc_mb": None, "heap_mb": None}
    probe = _heap_probe()
    for _ in range(repeat):
        if probe is not None:
            gc.collect()
            sampler = _HeapSampler(probe)
            sampler.start()
            kept = call()
            sampler.done.set()
            sampler.join()
            heap = (max(sampler.peak, probe()) - sampler.base) / 2**20
            result["heap_mb"] = heap if result["heap_mb"] is None else min(result["heap_mb"], heap)
            del kept
        gc.collect()
        tracemalloc.start()
        try:
            kept = call()
            peak = tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()
        del kept
        result["tracemalloc_mb"] = peak if result["tracemalloc_mb"] is None else min(result["tracemalloc_mb"], peak)
    return result


def graph_runtime(case: Case, settings: "Settings") -> Dict[str, Any]:
    """Forward time of the specfx graph with guards, with guards=False and of
    eager (a second guards=False copy measures the noise floor, A/A), and the
    CPU time one forward spends inside its guard calls, measured directly."""
    guarded = specfx.trace(case.model, case.args, policy=POLICY)
    unguarded = specfx.trace(case.model, case.args, policy=POLICY, guards=False)
    control = specfx.trace(case.model, case.args, policy=POLICY, guards=False)
    args = case.args
    calls = {"eager": lambda: case.model(*args), "guarded": lambda: guarded(*args),
             "guards=False": lambda: unguarded(*args), "A/A": lambda: control(*args)}
    with torch.no_grad():
        timings = measure(calls, dataclasses.replace(settings, max_rounds=2 * settings.max_rounds),
                          settings.runtime_budget_s)
        guard_ms = guard_calls_ms(guarded, args)
    out: Dict[str, Any] = {name: t.summary() for name, t in timings.items()}
    out["guards"] = sum(1 for s in guarded.specializations if s.guard)
    out["guard_calls_ms"] = guard_ms
    out["guard_share"] = _ratio(guard_ms, out["guards=False"].get("median_ms"))
    return out


class _ThreadProbe(nn.Module):
    """A leaf whose forward reports the torch thread count it runs with to ``report``
    (a callback, not a list on the module: specfx puts the module's own containers
    back after the trace, so a count appended to one would be gone)."""

    def __init__(self, report: Callable[[int], None]) -> None:
        super().__init__()
        self.report = report

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.report(torch.get_num_threads())
        return x + 1


def value_threads() -> Dict[str, Any]:
    """The torch thread count while specfx computes example values, next to the user's:
    tracing must not change it (a busy machine makes extra OpenMP threads spin)."""
    seen: List[int] = []
    specfx.trace(_ThreadProbe(seen.append), (torch.zeros(2),), leaf_modules=[_ThreadProbe])
    return {"user": torch.get_num_threads(), "inside_trace": seen[-1] if seen else None}


# -- running ---------------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    min_rounds: int
    max_rounds: int
    budget_s: float  # timing budget per contender and case
    runtime_budget_s: float  # the same for graph runtimes
    slow_s: float  # a contender slower than this is sampled once (its warm-up)
    chain_sizes: Tuple[int, ...]
    peers_max_ops: int  # peers are not run on longer chains
    memory_cases: Tuple[str, ...]
    clock: str = "cpu"
    long_chain_rounds: int = 5  # rounds of the chains timed together (seconds per call at 100k ops)

    @property
    def flat_from(self) -> int:
        """The chain size from which per-node cost must stay flat."""
        return 1000 if max(self.chain_sizes) >= 100000 else 100


def settings_for(quick: bool, slow_s: Optional[float], peers_max_ops: Optional[int], clock: str) -> Settings:
    if quick:
        return Settings(True, 3, 5, 0.2, 0.2, slow_s or 0.25, (10, 100, 1000), peers_max_ops or 100,
                        ("res-norm-200",), clock, long_chain_rounds=3)
    return Settings(False, 9, 15, 3.0, 1.5, slow_s or 1.5, (10, 100, 1000, 10000, 100000),
                    peers_max_ops or 1000, MEMORY_MODELS, clock)


def machine() -> Dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "specfx": specfx.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "commit": _commit()}


def _commit() -> Optional[str]:
    """The repository's commit, with ``+dirty`` when specfx/ has uncommitted changes."""
    root = DOCS_PATH.parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "specfx"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def run(settings: Settings, log: Callable[[str], None]) -> Dict[str, Any]:
    started = time.perf_counter()
    plain_log = log

    def log(message: str) -> None:
        plain_log(f"[{time.perf_counter() - started:5.0f} s] {message}")

    results: Dict[str, Any] = {"machine": machine(), "mode": "quick" if settings.quick else "full",
                               "clock": settings.clock, "peers_max_ops": settings.peers_max_ops,
                               "flat_from": settings.flat_from, "cases": {}, "memory": {}, "runtime": {}}
    cases = build_cases(settings.chain_sizes)
    for call in contender_calls(cases[0], CONTENDERS).values():  # pay one-time import costs untimed
        try:
            call()
        except Exception:
            pass
    results["threads"] = value_threads()
    # The chains whose marginals give the flatness are timed together (see measure_jointly).
    joint = [c for c in cases if c.ops is not None and c.ops >= settings.flat_from]
    joint_timings: Dict[str, Dict[str, Timing]] = {}

    def contenders_for(case: Case) -> List[str]:
        return [n for n in CONTENDERS if case.ops is None or case.ops <= settings.peers_max_ops or n not in PEERS]

    for case in cases:
        nodes = len(checked_trace(case).graph.nodes)
        if case in joint:
            if not joint_timings:
                log(f"{', '.join(c.name for c in joint)}: timing in the same rounds ...")
                joint_timings = measure_jointly(joint, contenders_for, settings)
            log(f"{case.name}: {nodes} nodes")
            timings = joint_timings[case.name]
        else:
            log(f"{case.name}: {nodes} nodes, timing {len(contenders_for(case))} contenders ...")
            timings = measure(contender_calls(case, contenders_for(case)), settings, settings.budget_s)
        results["cases"][case.name] = {
            "description": case.description, "ops": case.ops,
            "nodes": nodes, "timings": {n: t.summary() for n, t in timings.items()}}
        if case.name in settings.memory_cases:
            log(f"{case.name}: peak memory ...")
            working = [n for n in ("eager", "symbolic_trace", "specfx", "specfx+ex")
                       if "error" not in results["cases"][case.name]["timings"][n]]
            calls = contender_calls(case, working)
            results["memory"][case.name] = {n: peak_memory(c) for n, c in calls.items()}
        if case.name in GUARD_MODELS + ("seed",):
            log(f"{case.name}: graph runtime and guard cost ...")
            results["runtime"][case.name] = graph_runtime(case, settings)
    log("Specializer prologue ...")
    results["prologue"] = [prologue_cost(Policy(bool=True)), prologue_cost(Policy(shapes=True))]
    results["machine"]["load_average_end"] = results["machine"]["load_average"] and [
        round(x, 2) for x in os.getloadavg()]
    results["ratios"] = ratios(results)
    results["scaling"] = scaling(results)
    results["targets"] = targets(results)
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    return results


SCALING_CONTENDERS = ("symbolic_trace", "specfx", "specfx+ex")


def measure_jointly(cases: Sequence[Case], names: Callable[[Case], Sequence[str]],
                    settings: Settings) -> Dict[str, Dict[str, Timing]]:
    """Time the contenders ``names(case)`` on all ``cases`` in the same interleaved rounds,
    ``long_chain_rounds`` of them, every call sampled: the flatness compares the chains with
    each other, and timing each size in its own stretch of minutes let a change of machine
    load between two sizes move their marginal."""
    calls = {f"{case.name}|{name}": call for case in cases
             for name, call in contender_calls(case, names(case)).items()}
    rounds = dataclasses.replace(settings, slow_s=math.inf, min_rounds=settings.long_chain_rounds,
                                 max_rounds=settings.long_chain_rounds)
    timings = measure(calls, rounds, budget_s=1e9)  # the rounds, not a budget, set the samples
    return {case.name: {name: timings[f"{case.name}|{name}"] for name in names(case)} for case in cases}


def run_scaling(settings: Settings, log: Callable[[str], None]) -> Dict[str, Any]:
    """Only the chain rows (``--scaling``): their per-op cost and flatness, in a few minutes."""
    started = time.perf_counter()
    results: Dict[str, Any] = {"machine": machine(), "mode": "scaling", "clock": settings.clock,
                               "flat_from": settings.flat_from, "cases": {}}
    cases = chain_cases(settings.chain_sizes)
    log(f"chains of {', '.join(map(str, settings.chain_sizes))} ops, {settings.long_chain_rounds} rounds ...")
    timings = measure_jointly(cases, lambda case: SCALING_CONTENDERS, settings)
    for case in cases:
        results["cases"][case.name] = {"description": case.description, "ops": case.ops, "timings": {
            name: timing.summary() for name, timing in timings[case.name].items()}}
    results["machine"]["load_average_end"] = results["machine"]["load_average"] and [
        round(x, 2) for x in os.getloadavg()]
    results["scaling"] = scaling(results)
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    return results


def _stat(results: Dict[str, Any], case: str, name: str, stat: str = "median_ms") -> Optional[float]:
    return results["cases"][case]["timings"].get(name, {}).get(stat)


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def ratios(results: Dict[str, Any]) -> Dict[str, Dict[str, Dict[str, Optional[float]]]]:
    """Per case: each ratio of medians, and the same ratio of minima (the
    minimum is the sample least disturbed by other processes)."""
    out: Dict[str, Dict[str, Dict[str, Optional[float]]]] = {}
    for case in results["cases"]:
        row: Dict[str, Dict[str, Optional[float]]] = {}
        for stat, key in (("median_ms", "median"), ("min_ms", "min")):
            m = functools.partial(_stat, results, case, stat=stat)
            fx_eager = m("symbolic_trace") + m("eager") if m("symbolic_trace") and m("eager") else None
            pairs = {"specfx+ex / (symbolic_trace + eager)": (m("specfx+ex"), fx_eager),
                     "specfx / symbolic_trace": (m("specfx"), m("symbolic_trace"))}
            pairs.update({f"specfx+ex / {peer}": (m("specfx+ex"), m(peer)) for peer in PEERS})
            for label, (a, b) in pairs.items():
                row.setdefault(label, {})[key] = _ratio(a, b)
        out[case] = row
    return out


def scaling(results: Dict[str, Any]) -> Dict[str, Any]:
    """µs per op on the chain: total (trace time / N, which includes the fixed
    per-trace cost) and marginal (Δ trace time / Δ N between successive N, the
    cost of one more op). Flatness is the last marginal over the first one
    from N=``flat_from`` on, of medians and of minima: near 1 when the cost of a node
    does not grow with N (no quadratic guards, names, source lines or scopes)."""
    chains = sorted((c["ops"], name) for name, c in results["cases"].items() if c["ops"])
    out: Dict[str, Any] = {"sizes": [n for n, _ in chains], "us_per_op": {}, "marginal_us_per_op": {},
                           "flatness": {}, "flatness_of_minima": {}}
    for name in ("specfx+ex", "specfx", "symbolic_trace"):
        for stat, key in (("median_ms", "flatness"), ("min_ms", "flatness_of_minima")):
            times = {n: _stat(results, case, name, stat) for n, case in chains}
            marginal = {}
            for (n1, _), (n2, _) in zip(chains, chains[1:]):
                if times[n1] is not None and times[n2] is not None:
                    marginal[f"{n1}-{n2}"] = (times[n2] - times[n1]) * 1000 / (n2 - n1)
            tail = [v for k, v in marginal.items() if int(k.split("-")[0]) >= results["flat_from"]]
            out[key][name] = _ratio(tail[-1], tail[0]) if len(tail) > 1 else None
            if stat == "median_ms":
                out["us_per_op"][name] = {n: _ratio(t, n / 1000) for n, t in times.items()}
                out["marginal_us_per_op"][name] = marginal
    return out


# -- reporting -------------------------------------------------------------------------------


def _fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{max(0, digits - 1 - int(math.floor(math.log10(abs(value)))) if value else 1)}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _target(value: Optional[float], limit: float, strict: bool = False) -> str:
    if value is None:
        return "—"
    ok = value < limit if strict else value <= limit
    return f"{value:.2f} {'✓' if ok else '✗'}"


def _worst(values: Sequence[Tuple[Optional[float], str]]) -> Tuple[Optional[float], str]:
    known = [(v, where) for v, where in values if v is not None]
    return max(known) if known else (None, "—")


def _memory_total(entry: Optional[Dict[str, Optional[float]]]) -> Optional[float]:
    """MB at the peak: Python objects (tracemalloc) plus the C heap (tensors), each
    measured at its own peak, so an upper bound on the true peak."""
    if not entry or entry.get("tracemalloc_mb") is None or entry.get("heap_mb") is None:
        return None
    return max(0.0, entry["tracemalloc_mb"]) + max(0.0, entry["heap_mb"])


def memory_ratio(entry: Dict[str, Dict[str, Optional[float]]]) -> Optional[float]:
    """The memory target's ratio: specfx with examples over symbolic_trace's and eager's peaks."""
    base = [_memory_total(entry.get(n)) for n in ("symbolic_trace", "eager")]
    return _ratio(_memory_total(entry.get("specfx+ex")), None if None in base else sum(base))  # type: ignore[arg-type]


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The targets, each with its worst ratio of medians (and of minima) over its
    models, and where; then whether specfx with examples is faster than each peer
    that also runs the model (make_fx, export)."""
    def ratio_rows(label: str) -> Tuple[Tuple[Optional[float], str], Tuple[Optional[float], str]]:
        return tuple(_worst([(results["ratios"][case][label][stat], case) for case in TARGET_MODELS
                             if case in results["ratios"]]) for stat in ("median", "min"))  # type: ignore[return-value]

    rows: List[Tuple[str, Tuple[Optional[float], str], Tuple[Optional[float], str], float]] = []
    rows.append(("with examples ≤ 1.15 × (symbolic_trace + eager)",
                 *ratio_rows("specfx+ex / (symbolic_trace + eager)"), 1.15))
    rows.append(("without examples ≤ 1.05 × symbolic_trace", *ratio_rows("specfx / symbolic_trace"), 1.05))
    sc = results["scaling"]
    for name in ("specfx+ex", "specfx"):
        rows.append((f"{LABELS[name]}: per-op cost flat from {results['flat_from']} ops (last marginal ≤ 1.2 × "
                     "first)", (sc["flatness"][name], "chain"), (sc["flatness_of_minima"][name], "chain"), 1.2))
    memory = [(memory_ratio(entry), case) for case, entry in results["memory"].items()]
    rows.append(("peak memory ≤ 1.2 × (symbolic_trace's + eager's)", _worst(memory), (None, "—"), 1.2))
    shares = [(r.get("guard_share"), case) for case, r in results["runtime"].items() if case in GUARD_MODELS]
    worst_share = _worst(shares)
    rows.append(("guards ≤ 1 % of a CPU forward (share of the guards=False forward)",
                 (None if worst_share[0] is None else 100 * worst_share[0], worst_share[1]), (None, "—"), 1.0))
    prologue = _worst([(p["us_per_input"], p["policy"]) for p in results.get("prologue", [])])
    rows.append(("Specializer prologue ≤ 2 µs per guarded input", prologue, (None, "—"), 2.0))
    out = [{"target": t, "worst": med[0], "where": med[1], "worst_of_minima": low[0], "limit": limit,
            "met": None if med[0] is None else med[0] <= limit} for t, med, low, limit in rows]
    threads = results.get("threads", {})
    out.append({"target": "value computation runs with the user's torch threads", "worst":
                threads.get("inside_trace"), "where": f"user set {threads.get('user')}", "worst_of_minima": None,
                "limit": threads.get("user"), "met": threads.get("inside_trace") == threads.get("user")})
    for peer in ("make_fx real", "make_fx symbolic", "export"):
        value = _worst([(row[f"specfx+ex / {peer}"]["median"], case) for case, row in results["ratios"].items()])
        out.append({"target": f"{LABELS['specfx+ex']} faster than {peer}", "worst": value[0], "where": value[1],
                    "worst_of_minima": None, "limit": 1.0, "met": None if value[0] is None else value[0] < 1.0})
    return out


def memory_table(memory: Dict[str, Dict[str, Dict[str, Optional[float]]]]) -> List[str]:
    out = ["### Peak memory while tracing, MB above the start: Python objects (tracemalloc peak: "
           "graph, proxies, records; tensor storage is allocated in C++ and not seen) / whole C heap "
           "(glibc mallinfo2, sampled every ~0.5 ms: includes tensor storage); the target compares "
           "their sums: specfx (ex.) / (symbolic_trace + eager fwd) ≤ 1.2", ""]
    names = [n for n in CONTENDERS if any(n in m for m in memory.values())]
    rows = [[c] + [f"{_fmt(m[n]['tracemalloc_mb'])} / {_fmt(m[n]['heap_mb'])}" if n in m else "—" for n in names]
            + [_target(memory_ratio(m), 1.2)] for c, m in memory.items()]
    return out + _table(["model"] + [LABELS.get(n, n) for n in names] + ["ratio of sums"], rows)


def memory_only(names: Sequence[str]) -> Dict[str, Dict[str, Dict[str, Optional[float]]]]:
    """The peak-memory rows alone, for ``names`` (models and ``chain-N``), each contender
    called once untimed first, as the full run's timing rounds do before its memory rows."""
    sizes = tuple(int(n.split("-", 1)[1]) for n in names if n.startswith("chain-"))
    out = {}
    for case in (c for c in build_cases(sizes) if c.name in names):
        calls = contender_calls(case, ("eager", "symbolic_trace", "specfx", "specfx+ex"))
        for call in calls.values():
            call()
        out[case.name] = {n: peak_memory(c) for n, c in calls.items()}
    return out


def render(results: Dict[str, Any]) -> str:
    info, out, notes = results["machine"], [], []

    def cell(case: str, name: str, part: str = "median") -> str:
        timing = results["cases"][case]["timings"].get(name)
        if timing is None:
            return "—"
        if "error" in timing:
            note = f"{name} on {case}: {timing['error']}"
            if note not in notes:
                notes.append(note)
            return f"fails[{notes.index(note) + 1}]"
        if part == "median":
            return _fmt(timing["median_ms"])
        return f"{_fmt(timing['min_ms'])}–{_fmt(timing['max_ms'])} ×{timing['n']}"

    out.append(f"Machine: {info['platform']}, {info['cpu']}, {info['cpu_count']} CPUs "
               f"(torch threads {info['torch_threads']}); torch {info['torch']}, Python {info['python']}, "
               f"specfx {info['specfx']} (commit {info['commit']}); {info['date']}; load average "
               f"{info['load_average']} at start, {info['load_average_end']} at end; {results['mode']} run, "
               f"{results['elapsed_s']} s. Times are {CLOCK_NAMES[results['clock']]}, medians and minima "
               f"of interleaved rounds (order rotated per round), all contenders in one process.")
    threads = results.get("threads", {})
    out += ["", f"torch threads: {threads.get('user')} (set by the benchmark, `--threads`); specfx computed "
            f"example values with {threads.get('inside_trace')} (read by a leaf module during a trace)."]
    out += ["", "### Targets: worst over the models, ratio of medians (of minima)", ""]
    out += _table(["target", "worst", "(of minima)", "on", "met"],
                  [[t["target"], _fmt(t["worst"]), _fmt(t["worst_of_minima"]), t["where"],
                    {True: "✓", False: "✗", None: "—"}[t["met"]]] for t in results["targets"]])
    out += ["", f"Trace-time targets are on {', '.join(TARGET_MODELS)}; guards on {', '.join(GUARD_MODELS)}."]
    header = ["model", "nodes (specfx)"] + [LABELS.get(n, n) for n in CONTENDERS]
    out += ["", "### Trace time, median ms", ""]
    out += _table(header, [[c, str(d["nodes"])] + [cell(c, n) for n in CONTENDERS]
                           for c, d in results["cases"].items()])
    out += ["", "### Spread: min–max ms ×samples", ""]
    out += _table(["model"] + [LABELS.get(n, n) for n in CONTENDERS],
                  [[c] + [cell(c, n, "spread") for n in CONTENDERS] for c in results["cases"]])
    out += ["", "### Ratios: of medians (of minima) — targets ≤ 1.15 vs symbolic_trace + eager, ≤ 1.05 "
            "no-examples vs symbolic_trace, < 1 vs make_fx and export", ""]
    limits = {"specfx+ex / (symbolic_trace + eager)": (1.15, False), "specfx / symbolic_trace": (1.05, False),
              "specfx+ex / make_fx real": (1.0, True), "specfx+ex / make_fx symbolic": (1.0, True),
              "specfx+ex / export": (1.0, True)}
    ratio_names = list(next(iter(results["ratios"].values())))
    rows = []
    for case, row in results["ratios"].items():
        cells = []
        for label in ratio_names:
            median, minimum = row[label]["median"], row[label]["min"]
            text = _target(median, *limits[label]) if label in limits else _fmt(median)
            cells.append(text if median is None else f"{text} ({_fmt(minimum)})")
        rows.append([case] + cells)
    out += _table(["model"] + ratio_names, rows)
    out += scaling_table(results)
    if results["memory"]:
        out += [""] + memory_table(results["memory"])
    if results["runtime"]:
        out += ["", "### Runtime of the specfx graph, median ms (no_grad). guard calls: CPU ms one forward "
                "spends in its guards, timed directly (min of 5 batches), and their share of the guards=False "
                "forward (target ≤ 1 % on resnet50 and bert12); guarded / guards=False: ratio of medians (of "
                "minima); A/A: a second guards=False graph over the first, the noise floor of that ratio", ""]
        rows = []
        for case, r in results["runtime"].items():
            med = {k: r[k].get("median_ms") for k in ("eager", "guarded", "guards=False", "A/A")}
            low = {k: r[k].get("min_ms") for k in ("guarded", "guards=False")}
            share = r.get("guard_share")
            rows.append([case, str(r["guards"]), str(r["guarded"].get("n"))]
                        + [_fmt(med[k]) for k in ("eager", "guarded", "guards=False")]
                        + [_fmt(r.get("guard_calls_ms")),
                           "—" if share is None else f"{100 * share:.3f} % {'✓' if share <= 0.01 else '✗'}",
                           f"{_fmt(_ratio(med['guarded'], med['guards=False']))} "
                           f"({_fmt(_ratio(low['guarded'], low['guards=False']))})",
                           _fmt(_ratio(med["A/A"], med["guards=False"])),
                           _fmt(_ratio(med["guarded"], med["eager"]))])
        out += _table(["model", "guards", "samples", "eager", "guarded", "guards=False", "guard calls",
                       "guard share", "guarded / guards=False", "A/A", "guarded / eager"], rows)
    if results.get("prologue"):
        out += ["", "### Specializer prologue (the check that picks a variant): CPU µs per call on four inputs, "
                "each with a decision on its shape (min of 5 batches of 2000 calls)", ""]
        out += _table(["policy", "µs per call", "guarded inputs", "µs per guarded input (target ≤ 2)"],
                      [[p["policy"], _fmt(p["prologue_us"]), str(p["guarded_inputs"]), _target(p["us_per_input"], 2.0)]
                       for p in results["prologue"]])
    out += ["", "Contenders: `torch.fx.symbolic_trace(m)`; `specfx.trace(m)`; `specfx.trace(m, args, "
            "policy=Policy(Specialize.ALL))`; `torch.jit.trace(m, args)` (default check_trace); "
            "`make_fx(m, tracing_mode=...)(*args)` (symbolic with `_allow_non_fake_inputs=True`, since the "
            "parameters are real tensors); `torch.export.export(m, args)` (non-strict, the default). "
            "All in one process; rounds interleaved in rotated order; ×1 = the warm-up call only (slow). "
            f"Peers run on chains of up to {results['peers_max_ops']} ops (`--peers-max-ops`)."]
    if notes:
        out += ["", "Failures:", ""] + [f"{i}. {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def scaling_table(results: Dict[str, Any]) -> List[str]:
    """The chain's per-op cost and flatness, as Markdown lines."""
    sc = results["scaling"]
    sizes, segments = sc["sizes"], list(next(iter(sc["marginal_us_per_op"].values())))
    out = ["", "### Per-op trace cost on the chain, µs/op (medians): total (time / N) and marginal "
           f"(Δtime / ΔN); flatness = last marginal / first marginal from N={results['flat_from']}, of medians "
           "(of minima), target ≤ 1.2", ""]
    return out + _table(["contender"] + [f"N={n}" for n in sizes] + [f"Δ {k}" for k in segments] + ["flatness"],
                        [[LABELS.get(n, n)] + [_fmt(per.get(k)) for k in sizes]
                         + [_fmt(sc["marginal_us_per_op"][n].get(k)) for k in segments]
                         + [f"{_target(sc['flatness'][n], 1.2)} ({_fmt(sc['flatness_of_minima'][n])})"]
                         for n, per in sc["us_per_op"].items()])


def render_scaling(results: Dict[str, Any]) -> str:
    info = results["machine"]
    head = (f"{info['cpu']}, {info['cpu_count']} CPUs, torch threads {info['torch_threads']}; commit "
            f"{info['commit']}; {info['date']}; load average {info['load_average']} at start, "
            f"{info['load_average_end']} at end; {results['elapsed_s']} s. {CLOCK_NAMES[results['clock']]}; "
            "every size and contender in the same interleaved rounds.")
    return "\n".join([head] + scaling_table(results)) + "\n"


PROFILE_HEADING = "\n## Profile"


def write_docs(text: str, command: str) -> None:
    """Write the results to docs/benchmarks.md, keeping its hand-written profile section."""
    old = DOCS_PATH.read_text(encoding="utf-8") if DOCS_PATH.exists() else ""
    kept = old[old.index(PROFILE_HEADING):] if PROFILE_HEADING in old else ""
    DOCS_PATH.write_text(
        "# Benchmarks\n\nTrace time of specfx beside the other ways to get a graph from a PyTorch model. "
        f"Generated by `{command}`; the numbers are from the machine below, which may have been busy: "
        "compare ratios within a row rather than absolute times across machines.\n\n" + text + kept,
        encoding="utf-8")


# -- profiling -------------------------------------------------------------------------------


def _area(filename: str) -> str:
    for marker, area in (("/specfx/", "specfx"), ("/torch/fx/", "torch.fx"), ("/torch/nn/", "torch.nn"),
                         ("_prims_common", "torch._prims_common"), ("/torch/", "torch (other)")):
        if marker in filename:
            return area + ("/" + os.path.basename(filename) if area == "specfx" else "")
    return "builtins and C ops" if filename == "~" else "other Python"


def _profiled(call: Callable[[], Any], reps: int) -> Tuple[Dict[Tuple[str, int, str], Tuple[float, float]], float]:
    """Per function: (calls, self ms) per call of ``call`` under cProfile; and total ms."""
    call()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(reps):
        call()
    profiler.disable()
    stats: Any = pstats.Stats(profiler)
    return ({key: (value[1] / reps, value[2] * 1000 / reps) for key, value in stats.stats.items()},
            stats.total_tt * 1000 / reps)


def _both(first: Callable[[], Any], second: Callable[[], Any]) -> None:
    first()
    second()


def profile(names: Sequence[str] = ("res-norm-200", "mlp-seq-100"), reps: int = 5, top: int = 20) -> str:
    """Differential cProfile: per function, the self time specfx.trace spends beyond
    its baseline (with examples: symbolic_trace + one eager forward; without:
    symbolic_trace), largest first, with call counts. cProfile inflates small
    functions, so the list ranks costs; A/B timings size them."""
    out = []
    for case in (c for c in build_cases(()) if c.name in names):
        calls = contender_calls(case, ("eager", "symbolic_trace", "specfx", "specfx+ex"))
        pairs = (("specfx.trace with examples, Policy(ALL)", calls["specfx+ex"],
                  "symbolic_trace + eager", functools.partial(_both, calls["symbolic_trace"], calls["eager"])),
                 ("specfx.trace without examples", calls["specfx"], "symbolic_trace", calls["symbolic_trace"]))
        for label, call, base_label, base_call in pairs:
            mine, mine_total = _profiled(call, reps)
            base, base_total = _profiled(base_call, reps)
            out.append(f"== {case.name}: {label} {mine_total:.1f} ms vs {base_label} {base_total:.1f} ms "
                       f"per call under cProfile (+{mine_total - base_total:.1f} ms)")
            extra = sorted(set(mine) | set(base), key=lambda k: -(mine.get(k, (0, 0))[1] - base.get(k, (0, 0))[1]))
            for key in extra[:top]:
                (n1, t1), (n0, t0) = mine.get(key, (0, 0)), base.get(key, (0, 0))
                where = key[2] if key[0] == "~" else f"{_area(key[0])}:{os.path.basename(key[0])}:{key[1]}({key[2]})"
                out.append(f"   {t1 - t0:+7.2f} ms  calls {n0:7.0f} -> {n1:7.0f}  {where}")
    return "\n".join(out)


def _zoo_cell(timing: Dict[str, Any]) -> str:
    if "error" in timing:
        return "fails: " + timing["error"][:60]
    return f"{_fmt(timing['median_ms'])} ({_fmt(timing['min_ms'])})"


def zoo_trace_times(settings: "Settings", log: Callable[[str], None]) -> str:
    """Trace time of small transformers models (the zoo's configs) with specfx (examples,
    ``Policy(Specialize.ALL)``), HF's FX tracer (``transformers.utils.fx.symbolic_trace``)
    and ``torch.export.export``, interleaved like the main run; a Markdown table."""
    from transformers.utils import fx as hf_fx

    from tools.zoo import run as zoo

    transformers = zoo._transformers()
    torch.manual_seed(0)
    ids, mask = zoo._ids(2, 16, pad=3)
    models = {
        "BertModel": (transformers.BertModel(zoo.bert_config()), {"input_ids": ids, "attention_mask": mask}),
        "GPT2Model": (transformers.GPT2Model(zoo.gpt2_config()), {"input_ids": ids, "attention_mask": mask}),
        "LlamaModel": (transformers.LlamaModel(zoo.llama_config()), {"input_ids": ids, "attention_mask": mask}),
        "ViTModel": (transformers.ViTModel(zoo.vit_config()), {"pixel_values": torch.randn(2, 3, 32, 32)}),
    }
    rows = []
    names = ("eager", "specfx+ex", "hf symbolic_trace", "export")
    cases: Dict[str, Dict[str, Callable[[], Any]]] = {}
    for name, (model, kwargs) in models.items():
        model.eval()
        cases[name] = {
            "eager": functools.partial(model, **kwargs),
            "specfx+ex": functools.partial(specfx.trace, model, (), kwargs, policy=POLICY),
            "hf symbolic_trace": functools.partial(hf_fx.symbolic_trace, model, input_names=list(kwargs)),
            "export": functools.partial(torch.export.export, model, (), kwargs),
        }
    # The zoo's wrappers (last_hidden_state; the causal-mask builder and rotary embedding as
    # leaves), which specfx traces where the bare models stop in transformers' vmap mask code.
    for case in (c for c in zoo.CASES if c.name in ("hf-gpt2[leaf]", "hf-llama[leaf]", "hf-vit", "hf-t5")):
        built = case.build()
        (args, kwargs) = built.example
        cases[f"{case.name} (zoo wrapper)"] = {
            "eager": functools.partial(built.model, *args, **kwargs),
            "specfx+ex": functools.partial(specfx.trace, built.model, args, kwargs, policy=POLICY,
                                           leaf_modules=built.leaf_modules),
            "export": functools.partial(torch.export.export, built.model, args, kwargs),
        }
    for name, calls in cases.items():
        log(f"zoo {name} ...")
        timings = {n: t.summary() for n, t in measure(calls, settings, settings.budget_s).items()}
        timings.setdefault("hf symbolic_trace", {"error": "not a transformers PreTrainedModel"})

        ratio = {peer: _ratio(timings["specfx+ex"].get("median_ms"), timings[peer].get("median_ms"))
                 for peer in ("hf symbolic_trace", "export")}
        rows.append([name] + [_zoo_cell(timings[n]) for n in names]
                    + [_fmt(ratio["hf symbolic_trace"]), _fmt(ratio["export"])])
    header = ["model (2 layers, hidden 32, inputs 2x16)", "eager fwd", "specfx (ex., ALL)", "HF fx symbolic_trace",
              "torch.export", "specfx / HF fx", "specfx / export"]
    return "\n".join(["### transformers models: trace time, median (min) ms", ""] + _table(header, rows)) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer rounds, chain up to N=1000")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    parser.add_argument("--write-docs", action="store_true", help=f"also write {DOCS_PATH.name}")
    parser.add_argument("--slow", type=float, default=None, help="seconds above which a call is not repeated")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared machine, OpenMP threads that "
                             "spin-wait for a busy core make single forwards 10-100x slower at random)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: process CPU time (default: on a shared machine it leaves out the time "
                             "other processes hold the core; with --threads > 1 it sums the threads); "
                             "wall: elapsed time")
    parser.add_argument("--peers-max-ops", type=int, default=None,
                        help="longest chain the peers run on (default 1000; at 10000 they take 25-40 s each)")
    parser.add_argument("--zoo", action="store_true",
                        help="time small transformers models with specfx, HF's FX tracer and torch.export")
    parser.add_argument("--memory", nargs="*", metavar="MODEL",
                        help="only the peak-memory rows (default models: "
                             f"{' '.join(MEMORY_MODELS)}; any chain-N)")
    parser.add_argument("--scaling", nargs="*", type=int, metavar="N",
                        help="only the chain's per-op cost and flatness, sizes and contenders interleaved "
                             "(default sizes 1000 10000 100000; --rounds sets the rounds)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of the chains timed together (default 5, 3 with --quick)")
    parser.add_argument("--profile", nargs="*", metavar="MODEL",
                        help="differential cProfile of specfx.trace against its baselines instead of "
                             "benchmarking (default models: res-norm-200 mlp-seq-100)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # jit.trace's TracerWarnings, export's deprecations
    if args.profile is not None:
        print(profile(args.profile or ("res-norm-200", "mlp-seq-100")))
        return 0
    if args.memory is not None:
        print("\n".join(memory_table(memory_only(args.memory or MEMORY_MODELS))))
        return 0
    settings = settings_for(args.quick, args.slow, args.peers_max_ops, args.clock)
    if args.rounds is not None:
        settings = dataclasses.replace(settings, long_chain_rounds=args.rounds)
    if args.scaling is not None:
        settings = dataclasses.replace(settings, chain_sizes=tuple(sorted(args.scaling or (1000, 10000, 100000))))
        results = run_scaling(settings, log=lambda message: print(message, file=sys.stderr, flush=True))
        print(json.dumps(results, indent=2) if args.json else render_scaling(results))
        return 0
    if args.zoo:
        print(zoo_trace_times(settings, log=lambda message: print(message, file=sys.stderr, flush=True)))
        return 0
    results = run(settings, log=lambda message: print(message, file=sys.stderr, flush=True))
    text = render(results)
    if args.write_docs:
        write_docs(text, "python -m tools.bench.suite" + (" --quick" if args.quick else "") + " --write-docs")
    print(json.dumps(results, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
