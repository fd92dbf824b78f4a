"""Differential fuzzing of ``specfx.trace`` against eager PyTorch, beside ``torch.jit.trace``.

Usage::

    python -m tools.fuzz.run --n 2000 --seed 0         # counts as a table
    python -m tools.fuzz.run --n 2000 --seed 0 --json  # counts (and failing cases) as JSON
    python -m tools.fuzz.run --seed 0 --only 17        # print program 17 of seed 0 and its counts

Each program (``tools/fuzz/programs.py``) is traced with its random policy on one
example. When specfx refuses (``SpecializationError``) the policy is widened
the way the error suggests -- add the reported flag; if an inner ``scopes``
entry or annotation forbids it, drop scopes and annotations -- and traced
again, so every program gets a graph. Eager, the specfx graph and a
``torch.jit.trace`` of the same model on the same example (``check_trace=False``)
then run on fresh inputs. Counted per input: *agreed* (same output),
*guarded* (``GuardError``), *silent mismatch* (a different output, no error;
must be 0 for specfx), *other exceptions*; inputs on which eager itself raises
are skipped, and a graph that returns a value there is a failure (it answers
where the model has no answer). Inputs come in other dtypes too (int64, int32,
bool, float16: ``.item()`` answers an int, a float or a bool as the dtype says)
and with non-contiguous layouts.

Also checked for specfx, and listed as property violations: (b) each refusal
names a flag the policy really lacked, at the line that needed it, and no
trace succeeds that should have been refused; (c) every specialization has
exactly one guard node of the right kind, on the right node, and the records
are the decisions eager makes on the example; (d) a guard fires exactly when
eager's decisions on the input differ from those on the example, at the first
differing line. The exit status is 1 when there is a violation or a silent
mismatch for specfx.

Programs run in chunks in short-lived worker processes (``--jobs``, one per
CPU by default; ``--jobs 0`` runs in this process): a chunk that crashes or leaks
stays in its worker. (Guarded graphs once piled up in torch.fx's process-wide
``wrap`` registry, slowing a long-lived process down quadratically; fixed, see
``tests/test_fuzz.py::TestRegressions``.)

``--grammar classes`` runs the grammar of ``tools/fuzz/classes.py`` instead (no
``torch.jit.trace`` column); ``--family NAME`` only one of its families. With
``--json`` only the JSON is printed: anything written to stderr meanwhile (by
torch, by workers) is kept in its ``"stderr"`` entry, so ``--json ... 2>&1`` parses.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import io
import json
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Counter, Dict, Iterator, List, Optional, Tuple

import torch

import specfx
from specfx import GuardError, SpecializationError
from tools.fuzz import classes, programs

CHUNK = 50  # programs per worker process
GUARD_OF_KIND = specfx.guards.GUARDS  # kind of a record -> its guard function


def make_case(seed: int, index: int) -> programs.Case:
    """Program ``index`` of the corpus ``seed``."""
    return programs.generate_case(programs.RandomChooser(seed * 1_000_003 + index), tag=f"-{seed}-{index}")


# -- the checks ---------------------------------------------------------------------------------


def _names(flags: Any) -> List[str]:
    return sorted(flag.name for flag in flags)


def refusal_problem(error: SpecializationError, probe: programs.Probe,
                    program: programs.Program) -> Optional[str]:
    """Why a refusal is unjustified, or None when the policy really lacked a needed flag there."""
    need = probe.first_unmet
    if need is None:
        return f"refused although every need was met: {error.flag} at {error.location}"
    if error.flag not in need.alternatives:
        return f"refused for {error.flag}, but line {need.line} needs one of {_names(need.alternatives)}"
    if error.location != f"{program.filename}:{need.line}":
        return f"refusal points at {error.location}, the unmet need is at line {need.line}"
    return None


def record_problems(gm: torch.fx.GraphModule, probe: programs.Probe, program: programs.Program) -> List[str]:
    """Violations of "each specialization has exactly one guard" and of "records are the decisions made"."""
    problems = []
    nodes = {node.name: node for node in gm.graph.nodes}
    guards = programs.guard_functions()
    guard_nodes = {n.name for n in gm.graph.nodes if n.op == "call_function" and n.target in guards}
    uses = collections.Counter(s.guard for s in gm.specializations)
    for s in gm.specializations:
        node = nodes.get(s.guard)
        if node is None or node.target not in guards:
            problems.append(f"{s.guard_description}: {s.guard!r} is not a guard node of the graph")
        elif node.target is not GUARD_OF_KIND[s.kind] or node.args[0].name != s.node:
            problems.append(f"{s.guard_description}: {s.guard!r} checks {node.args[0]} with {node.target}")
        if uses[s.guard] > 1:
            problems.append(f"{s.guard_description}: guard {s.guard!r} shared by {uses[s.guard]} records")
        if s.location is None or s.location.filename != program.filename or not s.source:
            problems.append(f"{s.guard_description}: location {s.where} is not a line of the program")
    orphans = guard_nodes - set(uses)
    if orphans:
        problems.append(f"guard nodes without a record: {sorted(orphans)}")
    recorded = {(s.location.lineno if s.location else None, s.flag, programs.canonical(s.value))
                for s in gm.specializations}
    decided = {(f.line, f.flag, f.value) for f in probe.facets}
    if recorded != decided:
        problems.append(f"records only: {sorted(map(str, recorded - decided))}; "
                        f"decisions only: {sorted(map(str, decided - recorded))}")
    return problems


def trace_widening(case: programs.Case, counts: Counter, problems: List[str]) -> Tuple[Any, Any, Any]:
    """Trace, widening the policy after each refusal (checking each refusal): (graph or None, plan, probe)."""
    plan = case.plan
    for attempt in range(6):
        probe, _ = case.program.probe(plan, case.model, case.example)
        try:
            gm = programs.trace_quietly(case, plan)
        except SpecializationError as error:
            counts["trace refusals" if attempt == 0 else "further refusals"] += 1
            problem = refusal_problem(error, probe, case.program)
            if problem:
                problems.append(f"(b) {problem} [policy {plan.policy()!r}]")
            if error.flag in plan.base:  # denied by an inner scope or annotation
                plan = dataclasses.replace(plan, scopes=(), annotations=False)
            else:
                plan = plan.with_flag(error.flag)
            continue
        except Exception as error:
            counts["trace crashes"] += 1
            problems.append(f"trace crashed: {type(error).__name__}: {error}")
            return None, plan, probe
        need = probe.first_unmet
        if need is not None:
            problems.append(f"(b) traced although line {need.line} needs one of {_names(need.alternatives)} "
                            f"[policy {plan.policy()!r}]")
        return gm, plan, probe
    return None, plan, probe


def classify(gm: Any, case: programs.Case, plan: programs.PolicyPlan, probe: programs.Probe, label: str,
             x: torch.Tensor, expected: Any, problems: List[str]) -> str:
    """Run the specfx graph on one input: agreed / guarded / silent mismatches / other exceptions."""
    ok, actual = programs.run(gm, x)
    other, _ = case.program.probe(plan, case.model, x)
    differs = programs.first_difference(probe.facets, other.facets)
    where = f"input {label} {tuple(x.shape)}"
    if ok and programs.same_output(expected, actual):
        if differs is not None:
            problems.append(f"(d) {where}: eager decides {differs} differently, yet no guard fired")
        return "agreed"
    if ok:
        problems.append(f"(a) SILENT MISMATCH on {where}")
        return "silent mismatches"
    if isinstance(actual, GuardError):
        if differs is None:
            problems.append(f"(d) {where}: a guard fired though eager decides as on the example: {actual}")
        elif not actual.where.startswith(f"{case.program.filename}:{differs.line}:"):
            problems.append(f"(d) {where}: guard at {actual.where}, but eager first differs at {differs}")
        return "guarded"
    problems.append(f"(a) {where}: {type(actual).__name__}: {actual}")
    return "other exceptions"


def jit_trace(case: programs.Case) -> Any:
    """``torch.jit.trace`` of the model on the example, or None if it cannot trace it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TracerWarnings: jit.trace's own notes on what it baked in
            return torch.jit.trace(case.model, (case.example.clone(),), check_trace=False)
    except Exception:
        return None


def check_case(case: programs.Case, *, jit: bool = True) -> Dict[str, Any]:
    """Trace one case with specfx (and jit.trace), run every input and classify the outcomes."""
    counts: Counter = collections.Counter()
    problems: List[str] = []
    if not programs.run(case.model, case.example)[0]:
        counts["invalid examples"] += 1
        return {"counts": counts, "problems": problems, "policy": repr(case.plan.policy())}
    gm, plan, probe = trace_widening(case, counts, problems)
    if gm is not None:
        counts["programs traced"] += 1
        problems += [f"(c) {problem}" for problem in record_problems(gm, probe, case.program)]
    jm = jit_trace(case) if jit else None
    if jit and jm is None:
        counts["jit: trace failures"] += 1
    for label, x in case.inputs:
        ok, expected = programs.run(case.model, x)
        if not ok:
            counts["inputs skipped (eager raised)"] += 1
            if gm is not None and programs.run(gm, x)[0]:
                counts["graph returned where eager raised"] += 1
                problems.append(f"(a) input {label} {tuple(x.shape)} {x.dtype}: eager raised "
                                f"{type(expected).__name__}: {expected}, the graph returned a value")
            continue
        counts["inputs"] += 1
        if gm is not None:
            outcome = classify(gm, case, plan, probe, label, x, expected, problems)
            counts[outcome] += 1
            counts[f"{_dtype_name(x)} inputs: {outcome}"] += 1
        if jit and jm is None:
            counts["jit: inputs not run (trace failed)"] += 1
        elif jm is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ok, actual = programs.run(jm, x)
            if not ok:
                counts["jit: exceptions"] += 1
            elif programs.same_output(expected, actual):
                counts["jit: agreed"] += 1
            else:
                counts["jit: silent mismatches"] += 1
    return {"counts": counts, "problems": problems, "policy": repr(plan.policy())}


# -- the grammar of the classes of silent answers (tools/fuzz/classes.py) --------------------------


def _copy(value: Any) -> Any:
    """A copy of an argument that keeps what the code may read of it (subclass, attributes)."""
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        if isinstance(value, torch.nn.Parameter):
            copy = torch.nn.Parameter(copy, requires_grad=value.requires_grad)
        elif value.requires_grad:
            copy.requires_grad_(True)
        copy.__dict__.update(value.__dict__)
        return copy
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    return value


def _call(fn: Any, args: Tuple[Any, ...], grad: bool, seed: int) -> Tuple[bool, Any]:
    torch.manual_seed(seed)  # eager and the graph draw the same random numbers
    try:  # (torch.fx prints where in the generated code an exception arose: swallowed, as programs.run does)
        with torch.set_grad_enabled(grad), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return True, fn(*_copy(args))
    except Exception as error:
        return False, error


def _agree(expected: Any, actual: Any) -> bool:
    if not programs.same_output(expected, actual):
        return False
    pairs = zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual))
    return all(not isinstance(e, torch.Tensor) or e.requires_grad == a.requires_grad for e, a in pairs)


def check_class_case(case: classes.ClassCase, tag: str) -> Dict[str, Any]:
    """Trace one program of the class grammar and run every input: agreed / guarded / silent / other."""
    counts: Counter = collections.Counter()
    problems: List[str] = []
    fn = case.build(tag)
    if not _call(fn, case.example, True, 0)[0]:
        counts["invalid examples"] += 1
        return {"counts": counts, "problems": problems, "policy": repr(case.policy)}
    gm, policy = None, case.policy
    for attempt in range(2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gm = specfx.trace(fn, _copy(case.example), policy=policy)
            break
        except SpecializationError:
            counts["trace refusals" if attempt == 0 else "programs refused"] += 1
            policy = specfx.Policy(specfx.Specialize.ALL)
        except Exception as error:
            counts["trace crashes"] += 1
            problems.append(f"trace crashed: {type(error).__name__}: {error}")
            break
    if gm is None:
        return {"counts": counts, "problems": problems, "policy": repr(policy)}
    counts["programs traced"] += 1
    for index, (args, grad) in enumerate([(case.example, True), *case.inputs]):
        ok, expected = _call(fn, args, grad, index)
        if not ok:
            counts["inputs skipped (eager raised)"] += 1
            if _call(gm, args, grad, index)[0]:
                counts["graph returned where eager raised"] += 1
                problems.append(f"(a) input {index}: eager raised {type(expected).__name__}: {expected}, "
                                f"the graph returned a value")
            continue
        counts["inputs"] += 1
        ok, actual = _call(gm, args, grad, index)
        if torch.is_grad_enabled() is not True:
            problems.append(f"input {index}: the graph left grad mode changed")
            torch.set_grad_enabled(True)
        if ok and _agree(expected, actual):
            outcome = "agreed"
        elif ok:
            outcome = "silent mismatches"
            problems.append(f"(a) SILENT MISMATCH on input {index} (grad mode {grad})")
        elif isinstance(actual, GuardError):
            outcome = "guarded"
        else:
            outcome = "other exceptions"
            problems.append(f"(a) input {index}: {type(actual).__name__}: {actual}")
        counts[outcome] += 1
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        counts[f"{_dtype_name(first) if first is not None else 'no tensor'} inputs: {outcome}"] += 1
    return {"counts": counts, "problems": problems, "policy": repr(policy)}


def _dtype_name(x: torch.Tensor) -> str:
    return str(x.dtype).replace("torch.", "") + ("" if x.is_contiguous() else " non-contiguous")


# -- running a corpus ---------------------------------------------------------------------------


def run_chunk(job: Tuple[int, int, int, Optional[bool], Optional[str]]) -> Tuple[Dict[str, int], List[Dict[str, Any]]]:
    """Check programs ``start .. stop-1`` of ``seed``: summed counts and the failing cases
    (``jit`` None: the class grammar of tools/fuzz/classes.py, of one ``family`` if given)."""
    seed, start, stop, jit, family = job
    torch.set_num_threads(1)
    totals: Counter = collections.Counter()
    failures = []
    for index in range(start, stop):
        if jit is None:
            class_case = classes.generate(programs.RandomChooser(seed * 1_000_003 + index), family)
            result = check_class_case(class_case, f"-{seed}-{index}")
            totals["programs"] += 1
            totals[f"  class {class_case.family}"] += 1
            totals.update(result["counts"])
            if result["problems"]:
                totals["programs with problems"] += 1
                failures.append({"index": index, "policy": result["policy"], "problems": result["problems"],
                                 "example_shape": [], "source": class_case.source})
            continue
        case = make_case(seed, index)
        result = check_case(case, jit=jit)
        totals["programs"] += 1
        totals.update(result["counts"])
        if result["problems"]:
            totals["programs with problems"] += 1
            failures.append({"index": index, "policy": result["policy"], "problems": result["problems"],
                             "example_shape": list(case.example.shape), "source": case.program.source})
    return dict(totals), failures


def fuzz(n: int, seed: int, *, jit: Optional[bool] = True, start: int = 0, jobs: int = 0,
         chunk: int = CHUNK, family: Optional[str] = None) -> Dict[str, Any]:
    """Run programs ``start .. start+n-1`` of ``seed``: totals, failures and the elapsed seconds
    (``jit`` None: the class grammar, of one ``family`` if given).

    ``jobs=0`` runs in this process; otherwise chunks of ``chunk`` programs run
    in ``jobs`` forked workers, each used for one chunk only."""
    if family is not None and (jit is not None or family not in classes.CLASSES):
        raise ValueError(f"family= names one of the class grammar's families {sorted(classes.CLASSES)}")
    began = time.perf_counter()
    chunks = [(seed, lo, min(lo + chunk, start + n), jit, family) for lo in range(start, start + n, chunk)]
    if jobs == 0:
        results = [run_chunk(chunk) for chunk in chunks]
    else:
        with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=1) as pool:
            results = pool.map(run_chunk, chunks, chunksize=1)
    totals: Counter = collections.Counter()
    failures: List[Dict[str, Any]] = []
    for counts, chunk_failures in results:
        totals.update(counts)
        failures += chunk_failures
    totals["seconds"] = round(time.perf_counter() - began, 1)
    return {"seed": seed, "grammar": "programs" if jit is not None else "classes", "counts": dict(totals),
            "failures": failures}


ROWS = [  # (title, specfx key, jit.trace key)
    ("programs", "programs", None),
    ("  example rejected by eager (not traced)", "invalid examples", None),
    ("  traced (jit.trace: failed to trace)", "programs traced", "jit: trace failures"),
    ("  trace refusals (SpecializationError), then widened", "trace refusals", None),
    ("  refused under Specialize.ALL (class grammar)", "programs refused", None),
    ("inputs", "inputs", None),
    ("  agreed", "agreed", "jit: agreed"),
    ("  guarded (GuardError)", "guarded", None),
    ("  silent mismatches", "silent mismatches", "jit: silent mismatches"),
    ("  other exceptions", "other exceptions", "jit: exceptions"),
    ("inputs skipped (eager raised)", "inputs skipped (eager raised)", None),
    ("  of which the graph returned a value (a failure)", "graph returned where eager raised", None),
    ("property violations (programs)", "programs with problems", None),
]


def print_table(result: Dict[str, Any]) -> None:
    """Print the counts of specfx and jit.trace side by side (the class grammar runs no
    jit.trace: one column), then the first failures."""
    counts = result["counts"]
    jit = result.get("grammar") != "classes" and any(key.startswith("jit: ") for key in counts)
    print(f"seed {result['seed']}, {result.get('grammar', 'programs')} grammar, {counts.get('seconds')} s")
    print(f"{'':54}{'specfx':>9}{'jit.trace' if jit else '':>11}".rstrip())
    for title, key, jit_key in ROWS:
        if key == "programs refused" and result.get("grammar") != "classes":
            continue
        jit_value = "" if jit_key is None or not jit else counts.get(jit_key, 0)
        title = title if jit else title.split(" (jit.trace")[0]
        print(f"{title:54}{counts.get(key, 0):>9}{jit_value:>11}".rstrip())
    for key in sorted(k for k in counts if k.startswith("  class ")):
        print(f"{key:54}{counts[key]:>9}")
    outcomes = ("agreed", "guarded", "silent mismatches", "other exceptions")
    kinds = sorted({key.split(" inputs: ")[0] for key in counts if " inputs: " in key})
    if kinds:
        print(f"\n{'inputs by dtype':30}" + "".join(f"{outcome:>19}" for outcome in outcomes))
        for kind in kinds:
            print(f"{kind:30}" + "".join(f"{counts.get(f'{kind} inputs: {outcome}', 0):>19}" for outcome in outcomes))
    for failure in result["failures"][:5]:
        print(f"\nprogram {failure['index']} ({failure['policy']}, example {failure['example_shape']}):")
        for problem in failure["problems"][:5]:
            print(f"  {problem}")


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="number of programs (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the corpus (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--no-jit", action="store_true", help="skip the torch.jit.trace comparison")
    parser.add_argument("--grammar", choices=["programs", "classes"], default="programs",
                        help="programs: the control-flow grammar (default); classes: the classes of "
                             "answers a trace may take from an example (docs/soundness.md, "
                             "tools/fuzz/classes.py)")
    parser.add_argument("--family", choices=sorted(classes.CLASSES), default=None,
                        help="with --grammar classes: only this family")
    parser.add_argument("--only", type=int, default=None, help="run program ONLY alone and print its source")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per CPU; 0 runs in this process)")
    args = parser.parse_args(argv)
    if args.family is not None and args.grammar != "classes":
        parser.error("--family takes a family of --grammar classes")
    torch.set_num_threads(1)
    jit: Optional[bool] = None if args.grammar == "classes" else not args.no_jit
    if args.json:
        with _stderr_kept() as kept:
            result = _run(args, jit)
        result["stderr"] = kept.text
        print(json.dumps(result, indent=2, default=str))
    else:
        result = _run(args, jit)
        print_table(result)
    counts = result["counts"]
    return 1 if counts.get("programs with problems", 0) or counts.get("silent mismatches", 0) else 0


def _run(args: argparse.Namespace, jit: Optional[bool]) -> Dict[str, Any]:
    if args.only is not None and jit is None:
        case = classes.generate(programs.RandomChooser(args.seed * 1_000_003 + args.only), args.family)
        if not args.json:
            print(case.source)
        return fuzz(1, args.seed, jit=None, start=args.only, jobs=0, family=args.family)
    if args.only is not None:
        program_case = make_case(args.seed, args.only)
        if not args.json:
            print(program_case.program.source)
            print(f"policy: {program_case.plan.policy()!r}; example shape {tuple(program_case.example.shape)}\n")
        return fuzz(1, args.seed, jit=not args.no_jit, start=args.only, jobs=0)
    return fuzz(args.n, args.seed, jit=jit, jobs=args.jobs, family=args.family)


class _Kept:
    text = ""


@contextlib.contextmanager
def _stderr_kept() -> Iterator[_Kept]:
    """Everything written to file descriptor 2 meanwhile (by this process, by torch's C++
    code, by forked workers), kept instead of printed: its ``text`` once the block ends."""
    kept = _Kept()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as file:
        os.dup2(file.fileno(), 2)
        # Python-level writes go to descriptor 2 too (sys.stderr may be another stream: pytest's)
        stream = open(2, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)
        try:
            with contextlib.redirect_stderr(stream):
                yield kept
        finally:
            stream.flush()
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            kept.text = file.read()


if __name__ == "__main__":
    sys.exit(main())
