#!/usr/bin/env python
"""Model zoo runner: trace the models of ``tools/zoo/models.py`` with ``specfx.trace`` (and
``torch.fx.symbolic_trace`` beside it) and check the graphs against eager execution.

    python -m tools.zoo.run                           # every model, one table
    python -m tools.zoo.run --models 'hf-*' nn-lstm   # names or globs (see --list)
    python -m tools.zoo.run --json                    # machine-readable results
    python -m tools.zoo.run --in-process              # no subprocess per model (faster, but a crash ends the run)
    python -m tools.zoo.run --in-process --markdown --timings --models 'hf-*'   # docs/transformers.md's table

Per model the table shows: whether plain ``symbolic_trace`` traces it (and whether
that graph matches eager), whether ``specfx.trace`` does, the graph's node count,
the specializations by kind, the policy used, the largest absolute difference to
eager over fresh inputs, and what happens on an input that changes a specialized
decision (the guard that fires, and what eager does with that input).

The policy of a transformers architecture is found as a user finds it: trace with
``Policy()`` and follow each ``SpecializationError``'s first fix (a flag, or
``concrete_args``) until the trace succeeds (:func:`follow_messages`). Other models
try a ladder of policies, narrowest first.

Every model runs in a subprocess by default, because some failures are crashes
(segmentation faults), not exceptions; the table then says where it crashed.
"""

from __future__ import annotations

import argparse
import ast
import collections
import fnmatch
import importlib.util
import json
import math
import re
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

import specfx
from specfx import Policy, Specialize
from tools import CHECKOUT
from tools.zoo.models import ARCHITECTURES, ARCHITECTURES_BY_NAME, CASES, CASES_BY_NAME, Built, Call, Case

__all__ = ["ARCHITECTURES", "ARCHITECTURES_BY_NAME", "CASES", "CASES_BY_NAME", "follow_messages", "narrowest",
           "run_case", "run_pair", "tensors_of", "trace_built"]

# ---------------------------------------------------------------------------------------
# Tracing through torch.nn modules that torch.fx (and specfx.trace) keep as leaves
# ---------------------------------------------------------------------------------------


def _fx_tracer(leaf: Sequence[type] = (), nonleaf: Sequence[type] = ()) -> torch.fx.Tracer:
    """A plain torch.fx.Tracer with the same leaf decisions, for the symbolic_trace column."""

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            if nonleaf and isinstance(m, tuple(nonleaf)):
                return False
            if leaf and isinstance(m, tuple(leaf)):
                return True
            return super().is_leaf_module(m, qualname)

    return Tracer()


def _clone(value: Any) -> Any:
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), value)


LADDER = [Policy(), Policy(bool=True), Policy(iter=True), Policy(iter=True, bool=True), Policy(shapes=True),
          Policy(shapes=True, bool=True), Policy(shapes=True, bool=True, iter=True), Policy(Specialize.ALL)]

# ---------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------


def available(case: Case) -> bool:
    """Whether the case's optional dependency imports."""
    if case.requires is None:
        return True
    return importlib.util.find_spec(case.requires) is not None and _imports(case.requires)


def _imports(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:  # timm raises RuntimeError/ImportError without a working torchvision
        return False


def trace_built(built: Built, policy: Optional[Policy] = None) -> torch.fx.GraphModule:
    """Trace a built case with specfx, as the zoo does (through the torch.nn types it names)."""
    policy = built.policy if policy is None else policy
    with torch.set_grad_enabled(built.grad):
        args, kwargs = built.example
        return specfx.trace(built.model, args, kwargs or None, policy=policy,
                            leaf_modules=list(built.leaf_modules) or None,
                            trace_through=list(built.nonleaf) or None, concrete_args=built.concrete_args)


def narrowest(built: Built) -> Tuple[torch.fx.GraphModule, Policy]:
    """Trace with the first policy of the ladder that works (the case's own policy first)."""
    policies = ([built.policy] if built.policy is not None else []) + [p for p in LADDER if p != built.policy]
    error: Optional[Exception] = None
    for policy in policies:
        try:
            return trace_built(built, policy), policy
        except Exception as failure:  # the next, wider policy may work
            error = failure
    assert error is not None
    raise error


_FLAG_FIX = re.compile(r"pass policy=Policy\((\w+)=True\)")
_CONCRETE_FIX = re.compile(r"concrete_args=(\{[^}]*\})")


def follow_messages(built: Built, max_steps: int = 8) -> Tuple[torch.fx.GraphModule, Policy, Dict[str, Any]]:
    """Trace as a user does: start from ``Policy()`` and apply each ``SpecializationError``'s
    first fix (a flag, or ``concrete_args``) until the trace succeeds. Returns the graph, the
    policy and the concrete_args; re-raises an error that names no fix."""
    flags: Dict[str, bool] = {}
    concrete: Dict[str, Any] = dict(built.concrete_args or {})
    for _ in range(max_steps):
        policy = Policy(**flags)
        try:
            with torch.set_grad_enabled(built.grad):
                args, kwargs = built.example
                gm = specfx.trace(built.model, args, kwargs or None, policy=policy, concrete_args=concrete or None,
                                  leaf_modules=list(built.leaf_modules) or None)
            return gm, policy, concrete
        except specfx.SpecializationError as error:
            flag, constant = _FLAG_FIX.search(str(error)), _CONCRETE_FIX.search(str(error))
            if flag is not None and not flags.get(flag.group(1)):
                flags[flag.group(1)] = True
            elif constant is not None:
                concrete.update(ast.literal_eval(constant.group(1)))
            else:
                raise
    raise RuntimeError(f"no trace after following {max_steps} messages")


def run_pair(built: Built, gm: Callable[..., Any], call: Call, seed: int = 1234) -> Tuple[Any, Any]:
    """Eager reference and graph output on one input (same RNG seed for both, so dropout matches)."""
    args, kwargs = call
    reference = built.reference or built.model
    with torch.set_grad_enabled(built.grad):
        torch.manual_seed(seed)
        expected = reference(*_clone(args), **_clone(kwargs))
        torch.manual_seed(seed)
        actual = gm(*_clone(args), **_clone(kwargs))
    return expected, actual


def tensors_of(value: Any) -> List[torch.Tensor]:
    """The tensors of a model output (tensors, tuples, lists, dicts, transformers ModelOutput and
    caches: a cache's keys and values, layer by layer)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "self_attention_cache") and hasattr(value, "cross_attention_cache"):  # EncoderDecoderCache
        return tensors_of(value.self_attention_cache) + tensors_of(value.cross_attention_cache)
    if isinstance(getattr(value, "layers", None), list):  # DynamicCache, StaticCache, ...
        return [t for layer in value.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if isinstance(t, torch.Tensor)]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    return []


def max_abs_diff(expected: Any, actual: Any) -> float:
    """The largest absolute difference over all output tensors (inf on a structure or shape mismatch)."""
    want, got = tensors_of(expected), tensors_of(actual)
    if len(want) != len(got) or not want:
        return math.inf
    worst = 0.0
    for a, b in zip(want, got):
        if a.shape != b.shape:
            return math.inf
        if a.numel():
            worst = max(worst, (a.detach().float() - b.detach().float()).abs().max().item())
    return worst


def _first_line(error: BaseException, limit: int = 160) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _assumption(error: BaseException) -> str:
    match = re.search(r"assuming (.+?), but for this input", str(error))
    return match.group(1) if match else _first_line(error)


def policy_text(built: Built, policy: Optional[Policy]) -> str:
    """The policy and the leaf / non-leaf choices that go with it."""
    parts = [repr(policy) if policy is not None else "?"]
    if built.leaf_modules:
        parts.append("leaf: " + ", ".join(t.__name__ for t in built.leaf_modules))
    if built.nonleaf:
        parts.append("non-leaf: " + ", ".join(t.__name__ for t in built.nonleaf))
    return "; ".join(parts)


def symbolic_column(built: Built) -> str:
    """Plain torch.fx on the same root (same leaf choices): 'ok', 'ok, wrong', or the error."""
    try:
        if built.nonleaf or built.leaf_modules:
            tracer = _fx_tracer(built.leaf_modules, built.nonleaf)
            graph = tracer.trace(built.model, concrete_args=built.concrete_args)
            sgm = torch.fx.GraphModule(tracer.root, graph)
        else:
            sgm = torch.fx.symbolic_trace(built.model, concrete_args=built.concrete_args)
    except Exception as error:
        return "FAIL " + type(error).__name__
    try:
        expected, actual = run_pair(built, sgm, built.example)
    except Exception as error:
        return "ok, then fails to run: " + type(error).__name__
    diff = max_abs_diff(expected, actual)
    return "ok" if diff <= 1e-4 else f"ok, but differs from eager ({diff:.2g})"


def run_case(case: Case, report: Callable[[Dict[str, Any]], None] = lambda r: None,
             timings: bool = False) -> Dict[str, Any]:
    """Trace one case both ways and check it; ``report`` receives the partial result after
    each stage (the subprocess driver uses it to say where a crash happened).

    A transformers architecture is traced by :func:`follow_messages`. Otherwise the case's
    own policy is tried first; when it is ``None`` or fails, the ladder (narrowest first)
    is tried and the first policy that traces is reported. ``timings`` adds the trace
    times of ``torch.export`` and transformers' own FX tracer on the same model."""
    result: Dict[str, Any] = {"model": case.name, "group": case.group, "note": case.note,
                              "symbolic_trace": "", "specfx": "", "nodes": None, "specializations": {},
                              "policy": "", "max_abs_diff": None, "fresh_ran": 0, "fresh_rejected": [],
                              "guard": "", "trace_seconds": None}
    if not available(case):
        result["specfx"] = result["symbolic_trace"] = f"skipped ({case.requires} not importable)"
        return result
    built = case.build()
    result["policy"] = policy_text(built, built.policy)
    result["stage"] = "symbolic_trace"
    report(result)
    result["symbolic_trace"] = symbolic_column(built)
    result["stage"] = "specfx.trace"
    report(result)
    if case.group == "transformers":
        return _run_architecture(built, result, timings)
    policies = ([built.policy] if built.policy is not None else []) + [p for p in LADDER if p != built.policy]
    gm, first_error = None, None
    for index, policy in enumerate(policies):
        result["policy"] = policy_text(built, policy)
        report(result)  # a crash is then reported with the policy being tried
        started = time.perf_counter()
        try:
            gm = trace_built(built, policy)
        except Exception as error:
            first_error = first_error or error
            last_error = error
            continue
        result["trace_seconds"] = round(time.perf_counter() - started, 3)
        if index and built.policy is not None:
            failed = _first_line(first_error, 90)
            result["policy"] += f" (ladder; the preferred {built.policy!r} failed: {failed})"
        elif index or built.policy is None:
            result["policy"] += " (ladder)"
        break
    if gm is None:
        result["specfx"] = "FAIL " + _first_line(last_error)
        result["error_where"] = _error_location(last_error)
        result.pop("stage", None)
        return result
    result["specfx"] = "ok"
    result["nodes"] = len(gm.graph.nodes)
    result["specializations"] = dict(sorted(collections.Counter(s.kind for s in gm.specializations).items()))
    result["stage"] = "running the graph"
    report(result)
    worst = 0.0
    for call in [built.example] + built.fresh:
        try:
            expected, actual = run_pair(built, gm, call)
        except specfx.GuardError as error:  # another shape under a shape-specializing policy
            result["fresh_rejected"].append(_assumption(error))
            continue
        worst = max(worst, max_abs_diff(expected, actual))
        result["fresh_ran"] += 1
    result["max_abs_diff"] = worst if result["fresh_ran"] else None
    result["guard"] = _guard_column(built, gm)
    result.pop("stage", None)
    return result


INPUT_NAMES = ("padded", "other size", "unpadded, batch 1")


def _run_architecture(built: Built, result: Dict[str, Any], timings: bool) -> Dict[str, Any]:
    """A transformers model: follow specfx's messages, then run the graph on the calibration
    batch, another size and an unpadded batch of one."""
    started = time.perf_counter()
    try:
        gm, policy, concrete = follow_messages(built)
    except Exception as error:
        result["specfx"] = "FAIL " + _first_line(error)
        result["error_where"] = _error_location(error)
        result.pop("stage", None)
        return result
    result["trace_seconds"] = round(time.perf_counter() - started, 3)
    result["policy"] = policy_text(built, policy)
    result["concrete_args"] = concrete
    # the second trace alone, without the failed attempts of following the messages
    started = time.perf_counter()
    args, kwargs = built.example
    specfx.trace(built.model, args, kwargs, policy=policy, concrete_args=concrete or None,
                 leaf_modules=list(built.leaf_modules) or None)
    result["trace_seconds"] = round(time.perf_counter() - started, 3)
    if concrete:  # the graph is the model called with these arguments
        model = built.model
        built.reference = lambda *a, **k: model(*a, **k, **concrete)
    result["specfx"] = "ok"
    result["nodes"] = len(gm.graph.nodes)
    result["specializations"] = dict(sorted(collections.Counter(s.kind for s in gm.specializations).items()))
    result["stage"] = "running the graph"
    statuses, worst = [], 0.0
    for call in [built.example] + built.fresh:
        try:
            expected, actual = run_pair(built, gm, call)
        except specfx.GuardError as error:
            statuses.append("guard")
            result["fresh_rejected"].append(_assumption(error))
            continue
        diff = max_abs_diff(expected, actual)
        worst = max(worst, diff)
        statuses.append("ok" if diff <= 1e-4 else f"DIFF {diff:.1g}")
        result["fresh_ran"] += 1
    result["inputs"] = statuses
    result["max_abs_diff"] = worst if result["fresh_ran"] else None
    if timings:
        result["export_seconds"] = _time_export(built, concrete)
        result["hf_fx_seconds"] = _time_hf_fx(built)
    result.pop("stage", None)
    return result


def _time_export(built: Built, concrete: Dict[str, Any]) -> str:
    args, kwargs = built.example
    started = time.perf_counter()
    try:
        torch.export.export(built.model, args, {**kwargs, **concrete}, strict=False)
    except Exception as error:
        return "fails: " + type(error).__name__
    return f"{time.perf_counter() - started:.2f}"


def _time_hf_fx(built: Built) -> str:
    try:
        from transformers.utils import fx as hf_fx
    except ImportError:
        return "n/a (transformers 5)"
    started = time.perf_counter()
    try:
        hf_fx.symbolic_trace(built.model, input_names=list(built.example[1]))
    except Exception as error:
        text = str(error)
        return "not supported" if "not supported" in text else "fails: " + type(error).__name__
    return f"{time.perf_counter() - started:.2f}"


def _guard_column(built: Built, gm: Callable[..., Any]) -> str:
    """Run the graph on the input that changes a specialized decision: a GuardError is the
    right answer; else the graph must still match eager (then nothing depended on it)."""
    if built.guard_input is None:
        return "- (no input-dependent decision to flip)" if gm.specializations else "- (no specializations)"
    call, what = built.guard_input
    reference = built.reference or built.model
    try:
        with torch.set_grad_enabled(built.grad):
            torch.manual_seed(0)
            actual = gm(*_clone(call[0]), **_clone(call[1]))
    except specfx.GuardError as error:
        fired = f"{what}: GuardError ({_assumption(error)})"
        try:
            with torch.set_grad_enabled(built.grad):
                reference(*_clone(call[0]), **_clone(call[1]))
        except Exception as eager_error:
            return fired + f"; eager raises {type(eager_error).__name__}"
        return fired + "; eager runs (other path)"
    except Exception as error:
        return f"{what}: graph raised {_first_line(error, 80)} (no guard)"
    try:
        with torch.set_grad_enabled(built.grad):
            torch.manual_seed(0)
            expected = reference(*_clone(call[0]), **_clone(call[1]))
    except Exception as error:
        return f"{what}: graph ran but eager raises {type(error).__name__} (no guard)"
    diff = max_abs_diff(expected, actual)
    if diff <= 1e-4:
        return f"{what}: no guard needed, graph matches eager"
    return f"{what}: NOT guarded and differs from eager ({diff:.2g})"


def _error_location(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if "/specfx/" not in frame.filename and "/torch/fx/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}: {frame.line}"
    return ""


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def _run_isolated(case: Case, timeout: float, timings: bool = False) -> Dict[str, Any]:
    """Run one case in a subprocess; a crash is reported with the stage it happened in."""
    command = [sys.executable, "-m", "tools.zoo.run", "--worker", case.name] + (["--timings"] if timings else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=CHECKOUT)
    except subprocess.TimeoutExpired:
        return {"model": case.name, "group": case.group, "note": case.note, "symbolic_trace": "?",
                "specfx": f"timeout after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"model": case.name, "group": case.group, "note": case.note}
    if done.returncode != 0:
        stage = result.pop("stage", "startup")
        reason = _signal_name(done.returncode)
        column = "specfx" if stage in ("specfx.trace", "running the graph") else "symbolic_trace"
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', done.stderr)
        where = f" at {_short_path(frames[0][0])}:{frames[0][1]} {frames[0][2]}" if frames else ""
        if stage == "running the graph":
            result["specfx"] = f"traced, then CRASH ({reason}) running it{where}"
        else:
            result[column] = f"CRASH ({reason}){where}"
        if column == "symbolic_trace":
            result["specfx"] = "not run"
        result["crash_stack"] = [f"{_short_path(f)}:{n} {fn}" for f, n, fn in frames[:8]]
    result.pop("stage", None)
    return result


def _short_path(path: str) -> str:
    for marker in ("site-packages/", f"{CHECKOUT}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _format_table(results: Sequence[Dict[str, Any]]) -> str:
    header = ["model", "symbolic_trace", "specfx", "nodes", "specializations", "policy", "max|diff|",
              "guard on a changed path"]
    rows = []
    for r in results:
        specs = " ".join(f"{k}:{v}" for k, v in (r.get("specializations") or {}).items()) or "-"
        diff = r.get("max_abs_diff")
        diff_text = "-" if diff is None else ("inf" if diff == math.inf else f"{diff:.1e}")
        if r.get("nodes") is not None:
            ran, rejected = r.get("fresh_ran", 0), r.get("fresh_rejected") or []
            diff_text += f" ({ran}/{ran + len(rejected)} inputs)"
            if rejected:
                diff_text += f"; guard rejected {len(rejected)}: {rejected[0]}"
        rows.append([r["model"], r.get("symbolic_trace", ""), r.get("specfx", ""),
                     "-" if r.get("nodes") is None else str(r["nodes"]), specs if r.get("nodes") else "-",
                     r.get("policy", ""), diff_text, r.get("guard", "") or "-"])
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    widths = [min(w, 70) for w in widths]

    def fmt(row):
        cells = []
        for value, width in zip(row, widths):
            text = str(value)
            if len(text) > width:
                text = text[: width - 1] + "…"
            cells.append(text.ljust(width))
        return "  ".join(cells).rstrip()

    lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    notes = [f"  {r['model']}: {r['note']}" for r in results if r.get("note")]
    failures = []
    for r in results:
        if str(r.get("specfx", "")).startswith(("FAIL", "CRASH", "traced, then")):
            where = f"\n      at {_short_path(r['error_where'])}" if r.get("error_where") else ""
            stack = ("\n      stack: " + " <- ".join(r["crash_stack"][:4])) if r.get("crash_stack") else ""
            failures.append(f"  {r['model']} with {r.get('policy')}: {r.get('specfx')}{where}{stack}")
    out = "\n".join(lines)
    if failures:
        out += "\n\nspecfx failures (full text):\n" + "\n".join(failures)
    out += "\n\nnotes:\n" + "\n".join(notes)
    return out


def markdown_table(results: Sequence[Dict[str, Any]]) -> str:
    """The transformers rows as the Markdown table of docs/transformers.md."""
    import transformers

    header = ("| architecture | family | flags needed | guards | " + " / ".join(INPUT_NAMES)
              + " | trace s (specfx / export / HF fx) |")
    lines = [f"transformers {transformers.__version__}, torch {torch.__version__}, tiny configs, CPU.", "",
             header, "|---|---|---|---|---|---|"]
    for r in results:
        if r.get("group") != "transformers":
            continue
        name = r["model"][len("hf-"):]
        arch = ARCHITECTURES_BY_NAME.get(name)
        family = arch.family if arch else ""
        if r.get("specfx") != "ok":
            lines.append(f"| {name} | {family} | {r.get('specfx', '')} | | | |")
            continue
        policy = r.get("policy", "").replace("Policy()", "none").replace("Policy(", "").replace("=True", "")
        policy = policy.replace(")", "")
        if r.get("concrete_args"):
            policy += "; concrete_args=" + repr(r["concrete_args"])
        guards = sum((r.get("specializations") or {}).values())
        kinds = ", ".join(f"{k} {v}" for k, v in (r.get("specializations") or {}).items())
        inputs = " / ".join(r.get("inputs") or [])
        times = f"{r.get('trace_seconds')} / {r.get('export_seconds', '-')} / {r.get('hf_fx_seconds', '-')}"
        lines.append(f"| {name} | {family} | {policy} | {guards} ({kinds}) | {inputs} | {times} |")
    return "\n".join(lines)


def select(patterns: Optional[Sequence[str]]) -> List[Case]:
    """The cases whose names match any of the patterns (all when none)."""
    if not patterns:
        return list(CASES)
    def matches(case: Case, pattern: str) -> bool:
        return case.name == pattern or fnmatch.fnmatchcase(case.name, pattern)

    chosen = [case for case in CASES if any(matches(case, p) for p in patterns)]
    unknown = [p for p in patterns if not any(matches(c, p) for c in CASES)]
    if unknown:
        raise SystemExit(f"zoo.py: unknown model(s) {', '.join(unknown)}; see --list")
    return chosen


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", metavar="NAME", help="model names or globs (default: all)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--in-process", action="store_true", help="run every model in this process")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model (subprocess mode)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the transformers table of docs/transformers.md (for hf-* models)")
    parser.add_argument("--timings", action="store_true",
                        help="also time torch.export and transformers' FX tracer on each transformers model")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        import faulthandler

        faulthandler.enable()  # a crash prints the Python stack: the driver reports its innermost frame
        case = CASES_BY_NAME[options.worker]

        def report(partial):
            print(json.dumps(partial, default=str), flush=True)

        try:
            result = run_case(case, report, timings=options.timings)
        except Exception as error:  # a builder failed: still a result row
            result = {"model": case.name, "group": case.group, "note": case.note,
                      "symbolic_trace": "?", "specfx": "ERROR building the model: " + _first_line(error)}
        print(json.dumps(result, default=str), flush=True)
        return 0
    if options.list:
        for case in CASES:
            flag = "" if available(case) else f"   (needs {case.requires})"
            print(f"{case.name:32s} {case.group:12s} {case.note[:90]}{flag}")
        return 0
    results = []
    for case in select(options.models):
        if not options.json:
            print(f"... {case.name}", file=sys.stderr, flush=True)
        if options.in_process:
            result = run_case(case, timings=options.timings)
            result.pop("stage", None)
        else:
            result = _run_isolated(case, options.timeout, options.timings)
        results.append(result)
    if options.json:
        print(json.dumps(results, indent=2, default=str))
    elif options.markdown:
        print(markdown_table(results))
    else:
        print(_format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
