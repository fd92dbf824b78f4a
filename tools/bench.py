"""Trace-time benchmarks: specfx beside torch.fx.symbolic_trace, torch.jit.trace,
make_fx (real and symbolic) and torch.export, in one process, on the README's
seed example, a ResNet-50-like CNN, a 12-layer BERT-like encoder and a chain
of N = 10 ... 10000 ops (blocks with a guarded unpack each, for scaling).

    python tools/bench.py                # full run (under 5 minutes on 2 cores)
    python tools/bench.py --quick        # smoke run (under a minute)
    python tools/bench.py --json         # the same results as JSON on stdout
    python tools/bench.py --write-docs   # also write docs/benchmarks.md
    python tools/bench.py --profile      # cProfile of specfx.trace on bert12 and chain-10000

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
is measured in separate calls.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import dataclasses
import datetime
import functools
import gc
import itertools
import json
import math
import operator
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
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import specfx
from specfx import Policy, Specialize

DOCS_PATH = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


# -- models ------------------------------------------------------------------------------


class TestModule(nn.Module):
    """The README's seed example: split into chunks, then ``*``-unpack them into a call."""

    def call_cat(self, *args):
        return torch.cat(args, dim=1)

    def forward(self, x):
        x = torch.split(x, 2, dim=1)
        return self.call_cat(*x)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 convolutions with BatchNorm and a (projected) shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNetLike(nn.Module):
    """ResNet-50's layout (stem, bottleneck stages of 3/4/6/3 blocks, 50 weight
    layers) at a base width of ``width`` channels instead of 64."""

    def __init__(self, width: int = 32, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, inplanes = [], width
        for index, blocks in enumerate((3, 4, 6, 3)):
            planes = width * 2**index
            stage = []
            for block in range(blocks):
                stage.append(Bottleneck(inplanes, planes, stride=2 if block == 0 and index > 0 else 1))
                inplanes = planes * 4
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        batch, length, hidden = x.size()
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.head_dim**0.5
        if mask is not None:
            scores = scores + mask
        probs = self.dropout(scores.softmax(dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(batch, length, hidden)
        return self.out(context)


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.attention(x, mask)))
        return self.norm2(x + self.dropout(self.ffn_out(nn.functional.gelu(self.ffn_in(x)))))


class BertLike(nn.Module):
    """BERT's encoder (word/position/token-type embeddings, post-norm layers,
    an optional additive attention mask) at a smaller width."""

    def __init__(self, layers: int = 12, hidden: int = 256, heads: int = 4, intermediate: int = 1024,
                 vocab: int = 30522, max_positions: int = 512) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, input_ids, attention_mask=None):
        batch, length = input_ids.size()
        positions = torch.arange(length, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.dropout(self.norm(x))
        mask = None
        if attention_mask is not None:
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


class ChainBlock(nn.Module):
    """Five ops and one decision: the unpack is guarded, with its source line."""

    def forward(self, x):
        a, b = x.chunk(2)  # chunk, getitem, getitem
        return torch.cat([torch.relu(b), a])  # relu, cat


class Chain(nn.Module):
    """``n`` ops in a row: ``n // 5`` submodules of five ops each, so that the
    per-node cost includes guards, source lines, node names and scope lookups."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(ChainBlock() for _ in range(max(1, n // 5))))

    def forward(self, x):
        return self.blocks(x)


# -- cases and contenders ------------------------------------------------------------------

FLAGS = (Specialize.ITER_LEN, Specialize.BOOL, Specialize.SHAPES, Specialize.SCALARS)
CONTENDERS = ("eager", "symbolic_trace", "specfx", "specfx+ex", "jit.trace", "make_fx real",
              "make_fx symbolic", "export")
LABELS = {"eager": "eager fwd", "specfx": "specfx (no ex.)", "specfx+ex": "specfx (ex.+policy)"}
PEERS = ("jit.trace", "make_fx real", "make_fx symbolic", "export")


@dataclass
class Case:
    name: str
    description: str
    model: nn.Module
    args: Tuple[Any, ...]
    ops: Optional[int] = None  # the chain's N
    policy: Policy = field(default_factory=Policy)


def build_cases(chain_sizes: Sequence[int]) -> List[Case]:
    torch.manual_seed(0)
    ids = torch.randint(0, 30522, (2, 64))
    cases = [
        Case("seed", "README TestModule, x 1x4x10x10", TestModule(), (torch.randn(1, 4, 10, 10),)),
        Case("resnet50", "ResNet-50 layout, width 32, BatchNorm, x 1x3x64x64", ResNetLike().eval(),
             (torch.randn(1, 3, 64, 64),)),
        Case("bert12", "12 layers, hidden 256, 4 heads, ids 2x64 + mask", BertLike().eval(),
             (ids, torch.ones(2, 64))),
    ]
    cases += [Case(f"chain-{n}", f"{n // 5} blocks of 5 ops (chunk/unpack, relu, cat), x of 8", Chain(n),
                   (torch.randn(8),), ops=n)
              for n in chain_sizes]
    return cases


def policy_name(policy: Policy) -> str:
    keywords = ("iter", "bool", "shapes", "scalars")
    return "+".join(keyword for keyword, flag in zip(keywords, FLAGS) if flag in policy.flags) or "none"


def narrowest_policy(case: Case) -> Tuple[Policy, torch.fx.GraphModule]:
    """The policy with the fewest flags under which specfx traces ``case`` and
    the graph reproduces the eager output (tried in order: none, one flag, two...)."""
    for size in range(len(FLAGS) + 1):
        for combo in itertools.combinations(FLAGS, size):
            policy = Policy(functools.reduce(operator.or_, combo, Specialize.NONE))
            try:
                gm = specfx.trace(case.model, case.args, policy=policy)
            except specfx.SpecializationError:
                continue
            with torch.no_grad():
                if torch.allclose(gm(*case.args), case.model(*case.args)):
                    return policy, gm
    raise RuntimeError(f"{case.name}: no policy traces it")


def contender_calls(case: Case, names: Sequence[str]) -> Dict[str, Callable[[], Any]]:
    model, args, policy = case.model, case.args, case.policy
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


def peak_memory(call: Callable[[], Any]) -> Dict[str, Optional[float]]:
    """MB allocated at the peak of one call, above what was allocated before it:
    Python objects (tracemalloc: graphs, proxies, records; not tensor storage,
    which torch allocates in C++) and the whole C heap (sampled, includes tensors)."""
    result: Dict[str, Optional[float]] = {"tracemalloc_mb": None, "heap_mb": None}
    probe = _heap_probe()
    if probe is not None:
        gc.collect()
        sampler = _HeapSampler(probe)
        sampler.start()
        kept = call()
        sampler.done.set()
        sampler.join()
        result["heap_mb"] = (max(sampler.peak, probe()) - sampler.base) / 2**20
        del kept
    gc.collect()
    tracemalloc.start()
    try:
        kept = call()
        result["tracemalloc_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    del kept
    return result


def graph_runtime(case: Case, settings: "Settings") -> Dict[str, Any]:
    """Forward time of the specfx graph with guards, with guards=False and of
    eager; a second guards=False copy measures the noise floor (A/A)."""
    guarded = specfx.trace(case.model, case.args, policy=case.policy)
    unguarded = specfx.trace(case.model, case.args, policy=case.policy, guards=False)
    control = specfx.trace(case.model, case.args, policy=case.policy, guards=False)
    args = case.args
    calls = {"eager": lambda: case.model(*args), "guarded": lambda: guarded(*args),
             "guards=False": lambda: unguarded(*args), "A/A": lambda: control(*args)}
    with torch.no_grad():
        timings = measure(calls, dataclasses.replace(settings, max_rounds=2 * settings.max_rounds),
                          settings.runtime_budget_s)
    out = {name: t.summary() for name, t in timings.items()}
    out["guards"] = sum(1 for s in guarded.specializations if s.guard)
    return out


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


def settings_for(quick: bool, slow_s: Optional[float], peers_max_ops: Optional[int], clock: str) -> Settings:
    if quick:
        return Settings(True, 3, 5, 0.2, 0.2, slow_s or 0.25, (10, 100, 1000), peers_max_ops or 100,
                        ("seed",), clock)
    return Settings(False, 3, 15, 3.0, 1.5, slow_s or 1.5, (10, 100, 1000, 10000), peers_max_ops or 1000,
                    ("seed", "resnet50", "bert12", "chain-1000"), clock)


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
                               "cases": {}, "memory": {}, "runtime": {}}
    cases = build_cases(settings.chain_sizes)
    cases[0].policy = narrowest_policy(cases[0])[0]
    for call in contender_calls(cases[0], CONTENDERS).values():  # pay one-time import costs untimed
        try:
            call()
        except Exception:
            pass
    for case in cases:
        case.policy, gm = narrowest_policy(case)
        nodes = len(gm.graph.nodes)
        del gm
        names = [n for n in CONTENDERS if case.ops is None or case.ops <= settings.peers_max_ops
                 or n not in PEERS]
        log(f"{case.name}: policy {policy_name(case.policy)}, timing {len(names)} contenders ...")
        timings = measure(contender_calls(case, names), settings, settings.budget_s)
        results["cases"][case.name] = {
            "description": case.description, "policy": policy_name(case.policy), "ops": case.ops,
            "nodes": nodes, "timings": {n: t.summary() for n, t in timings.items()}}
        if case.name in settings.memory_cases:
            log(f"{case.name}: peak memory ...")
            working = [n for n in names if "error" not in results["cases"][case.name]["timings"][n]]
            calls = contender_calls(case, working)
            results["memory"][case.name] = {n: peak_memory(c) for n, c in calls.items()}
        if case.name in ("seed", "resnet50", "bert12"):
            log(f"{case.name}: graph runtime ...")
            results["runtime"][case.name] = graph_runtime(case, settings)
    results["machine"]["load_average_end"] = results["machine"]["load_average"] and [
        round(x, 2) for x in os.getloadavg()]
    results["ratios"] = ratios(results)
    results["scaling"] = scaling(results)
    results["targets"] = targets(results)
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
    from N=100 on, of medians and of minima: near 1 when the cost of a node
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
            from_100 = [v for k, v in marginal.items() if int(k.split("-")[0]) >= 100]
            out[key][name] = _ratio(from_100[-1], from_100[0]) if len(from_100) > 1 else None
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


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The issue's targets, each with its worst measured ratio (of medians) and where."""
    def worst(label: str, cases: Optional[Sequence[str]] = None) -> Tuple[Optional[float], str]:
        values = [(row[label]["median"], case) for case, row in results["ratios"].items()
                  if row[label]["median"] is not None and (cases is None or case in cases)]
        return max(values) if values else (None, "—")

    rows = [("trace ≤ 1.3 × (symbolic_trace + eager)", *worst("specfx+ex / (symbolic_trace + eager)"), 1.3),
            ("no examples ≤ 1.1 × symbolic_trace", *worst("specfx / symbolic_trace"), 1.1)]
    rows += [(f"faster than {peer}", *worst(f"specfx+ex / {peer}"), 1.0)
             for peer in ("make_fx real", "make_fx symbolic", "export")]
    for name in ("specfx+ex", "specfx"):
        rows.append((f"{LABELS[name]}: per-op cost flat within 1.5×", results["scaling"]["flatness"][name],
                     "chain", 1.5))
    guard_ratios = [(_ratio(r["guarded"].get("median_ms"), r["guards=False"].get("median_ms")), case)
                    for case, r in results["runtime"].items() if case in ("resnet50", "bert12")]
    guard_ratios = [(v, c) for v, c in guard_ratios if v is not None]
    rows.append(("guarded forward ≤ 1.02 × guards=False", *(max(guard_ratios) if guard_ratios else (None, "—")),
                 1.02))
    return [{"target": t, "worst": v, "where": w, "limit": limit,
             "met": None if v is None else (v < limit if limit == 1.0 else v <= limit)} for t, v, w, limit in rows]


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
               f"{results['elapsed_s']} s. Times are {CLOCK_NAMES[results['clock']]}.")
    out += ["", "### Targets (issue 5): worst ratio of medians over the models", ""]
    out += _table(["target", "worst", "on", "met"],
                  [[t["target"], _fmt(t["worst"]), t["where"], {True: "✓", False: "✗", None: "—"}[t["met"]]]
                   for t in results["targets"]])
    header = ["model", "nodes (specfx)", "policy"] + [LABELS.get(n, n) for n in CONTENDERS]
    out += ["", "### Trace time, median ms", ""]
    out += _table(header, [[c, str(d["nodes"]), d["policy"]] + [cell(c, n) for n in CONTENDERS]
                           for c, d in results["cases"].items()])
    out += ["", "### Spread: min–max ms ×samples", ""]
    out += _table(["model"] + [LABELS.get(n, n) for n in CONTENDERS],
                  [[c] + [cell(c, n, "spread") for n in CONTENDERS] for c in results["cases"]])
    out += ["", "### Ratios: of medians (of minima) — targets ≤ 1.3 vs symbolic_trace + eager, ≤ 1.1 "
            "no-examples vs symbolic_trace, < 1 vs make_fx and export", ""]
    limits = {"specfx+ex / (symbolic_trace + eager)": (1.3, False), "specfx / symbolic_trace": (1.1, False),
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
    sc = results["scaling"]
    sizes, segments = sc["sizes"], list(next(iter(sc["marginal_us_per_op"].values())))
    out += ["", "### Per-op trace cost on the chain, µs/op (medians): total (time / N) and marginal "
            "(Δtime / ΔN); flatness = last marginal / first marginal from N=100, of medians (of minima), "
            "target ≤ 1.5", ""]
    out += _table(["contender"] + [f"N={n}" for n in sizes] + [f"Δ {k}" for k in segments] + ["flatness"],
                  [[LABELS.get(n, n)] + [_fmt(per.get(k)) for k in sizes]
                   + [_fmt(sc["marginal_us_per_op"][n].get(k)) for k in segments]
                   + [f"{_target(sc['flatness'][n], 1.5)} ({_fmt(sc['flatness_of_minima'][n])})"]
                   for n, per in sc["us_per_op"].items()])
    if results["memory"]:
        out += ["", "### Peak memory while tracing, MB above the start: Python objects (tracemalloc peak: "
                "graph, proxies, records; tensor storage is allocated in C++ and not seen) / whole C heap "
                "(glibc mallinfo2, sampled every ~0.5 ms: includes tensor storage)", ""]
        names = [n for n in CONTENDERS if any(n in m for m in results["memory"].values())]
        out += _table(["model"] + [LABELS.get(n, n) for n in names],
                      [[c] + [f"{_fmt(m[n]['tracemalloc_mb'])} / {_fmt(m[n]['heap_mb'])}" if n in m else "—"
                              for n in names] for c, m in results["memory"].items()])
    if results["runtime"]:
        out += ["", "### Runtime of the specfx graph, median ms (no_grad). guarded / guards=False: ratio of "
                "medians (of minima), target ≤ 1.02 on resnet50 and bert12; A/A: a second guards=False graph "
                "over the first, the noise floor", ""]
        rows = []
        for case, r in results["runtime"].items():
            med = {k: r[k].get("median_ms") for k in ("eager", "guarded", "guards=False", "A/A")}
            low = {k: r[k].get("min_ms") for k in ("guarded", "guards=False")}
            rows.append([case, str(r["guards"]), str(r["guarded"].get("n"))]
                        + [_fmt(med[k]) for k in ("eager", "guarded", "guards=False")]
                        + [f"{_target(_ratio(med['guarded'], med['guards=False']), 1.02)} "
                           f"({_fmt(_ratio(low['guarded'], low['guards=False']))})",
                           _fmt(_ratio(med["A/A"], med["guards=False"])),
                           _fmt(_ratio(med["guarded"], med["eager"]))])
        out += _table(["model", "guards", "samples", "eager", "guarded", "guards=False",
                       "guarded / guards=False", "A/A", "guarded / eager"], rows)
    out += ["", "Contenders: `torch.fx.symbolic_trace(m)`; `specfx.trace(m)`; `specfx.trace(m, args, "
            "policy=<narrowest that works>)`; `torch.jit.trace(m, args)` (default check_trace); "
            "`make_fx(m, tracing_mode=...)(*args)` (symbolic with `_allow_non_fake_inputs=True`, since the "
            "parameters are real tensors); `torch.export.export(m, args)` (non-strict, the default). "
            "All in one process; rounds interleaved in rotated order; ×1 = the warm-up call only (slow). "
            f"Peers run on chains of up to {results['peers_max_ops']} ops (`--peers-max-ops`)."]
    if notes:
        out += ["", "Failures:", ""] + [f"{i}. {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def write_docs(text: str, command: str) -> None:
    DOCS_PATH.write_text(
        "# Benchmarks\n\nTrace time of specfx beside the other ways to get a graph from a PyTorch model. "
        f"Generated by `{command}`; the numbers are from the machine below, which may have been busy: "
        "compare ratios within a row rather than absolute times across machines.\n\n" + text,
        encoding="utf-8")


# -- profiling -------------------------------------------------------------------------------


def _area(filename: str) -> str:
    for marker, area in (("/specfx/", "specfx"), ("/torch/fx/", "torch.fx"), ("/torch/nn/", "torch.nn"),
                         ("_prims_common", "torch._prims_common"), ("/torch/", "torch (other)")):
        if marker in filename:
            return area + ("/" + os.path.basename(filename) if area == "specfx" else "")
    return "builtins and C ops" if filename == "~" else "other Python"


def profile(names: Sequence[str] = ("bert12", "chain-10000"), reps: int = 3, top: int = 15) -> str:
    """cProfile of specfx.trace with and without examples, and of symbolic_trace,
    on ``names``: self time by area, then specfx's functions by cumulative time."""
    out = []
    for case in (c for c in build_cases((10000,)) if c.name in names):
        case.policy = narrowest_policy(case)[0]
        calls = contender_calls(case, ("specfx+ex", "specfx", "symbolic_trace"))
        labels = ("specfx.trace, examples", "specfx.trace, no examples", "torch.fx.symbolic_trace")
        for label, call in zip(labels, calls.values()):
            call()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(reps):
                call()
            profiler.disable()
            stats: Any = pstats.Stats(profiler)
            total = stats.total_tt
            areas: Dict[str, float] = {}
            rows = []
            for (filename, line, function), (_, count, self_time, cumulative, _) in stats.stats.items():
                areas[_area(filename)] = areas.get(_area(filename), 0.0) + self_time
                if "/specfx/" in filename or function == "_extract_tensor_metadata":
                    where = f"{os.path.basename(filename)}:{line}({function})"
                    rows.append((cumulative, self_time, count, where))
            out.append(f"== {case.name}, {label}: {total * 1000 / reps:.1f} ms per trace under cProfile")
            out.append("   self time: " + ", ".join(f"{a} {t / total:.0%}" for a, t in
                                                    sorted(areas.items(), key=lambda kv: -kv[1])[:8]))
            for cumulative, self_time, count, where in sorted(rows, reverse=True)[:top]:
                out.append(f"   cum {cumulative / total:6.1%}  self {self_time / total:6.1%}  "
                           f"{count / reps:8.0f} calls/trace  {where}")
    return "\n".join(out)


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
    parser.add_argument("--profile", action="store_true", help="profile specfx.trace instead of benchmarking")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # jit.trace's TracerWarnings, export's deprecations
    if args.profile:
        print(profile())
        return 0
    settings = settings_for(args.quick, args.slow, args.peers_max_ops, args.clock)
    results = run(settings, log=lambda message: print(message, file=sys.stderr, flush=True))
    text = render(results)
    if args.write_docs:
        write_docs(text, "python tools/bench.py" + (" --quick" if args.quick else "") + " --write-docs")
    print(json.dumps(results, indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
