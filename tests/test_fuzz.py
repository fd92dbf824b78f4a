"""Differential fuzzing: specfx graphs of random programs against eager PyTorch.

Programs, policies, examples and fresh inputs come from ``tools/fuzz/programs.py``
(``from tools.fuzz import programs``: see ``tools/__init__.py``),
driven by hypothesis draws so that a failure shrinks to a small program; the
failing program's source and policy are attached as hypothesis notes. The
generator's instrumented twin of each program reports what the program needs
and what a specializing tracer bakes in (see that module's docstring); the
properties below are checked against that. ``python -m tools.fuzz.run`` runs the
same checks on thousands of programs, next to ``torch.jit.trace``.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import io
import json
import pickle
import re
from contextlib import redirect_stdout
from typing import Any, Sequence

import pytest
import torch
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import specfx
from specfx import GuardError, SpecializationError

from tools.fuzz import classes, programs, promise
from tools.fuzz import run as fuzz

FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class DrawChooser:
    """The generator's choices as hypothesis draws (``chance`` shrinks towards False)."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        """A drawn integer in ``[lo, hi]``."""
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[Any]) -> Any:
        """A drawn element of ``options``."""
        return self.data.draw(st.sampled_from(list(options)))

    def chance(self, p: float) -> bool:
        """True for about a fraction ``p`` of draws."""
        return self.data.draw(st.integers(0, 99)) >= 100 - round(100 * p)


def draw_case(data: Any, *, valid: bool = True) -> programs.Case:
    """A generated case (by default one whose example eager accepts), noted for the failure report."""
    case = programs.generate_case(DrawChooser(data))
    note(case.program.source)
    note(f"policy: {case.plan.policy()!r}; example shape {tuple(case.example.shape)}")
    if valid:
        assume(programs.run(case.model, case.example)[0])
    return case


def traced(case: programs.Case, **kwargs: Any) -> Any:
    """(graph, plan, probe) of the case under its policy widened to what the example path needs."""
    plan, probe = programs.widen(case, case.plan)
    return programs.trace_quietly(case, plan, **kwargs), plan, probe


def guard_nodes(gm: torch.fx.GraphModule) -> list:
    """The nodes of ``gm`` that call a specfx guard function."""
    guards = programs.guard_functions()
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in guards]


class TestTraceAgainstEager:
    """A guarded graph returns eager's result or raises GuardError, exactly when eager decides otherwise."""

    @FUZZ
    @given(data=st.data())
    def test_graph_returns_eager_result_or_raises_guard_error(self, data):
        """Per fresh input: the graph matches eager, or raises GuardError where eager first decides apart."""
        case = draw_case(data)
        gm, plan, probe = traced(case)
        for label, x in case.inputs:
            ok, expected = programs.run(case.model, x)
            if not ok:
                continue  # eager itself rejects this input
            other, twin_output = case.program.probe(plan, case.model, x)
            torch.testing.assert_close(twin_output, expected, equal_nan=True)  # the twin computes the same
            differs = programs.first_difference(probe.facets, other.facets)
            ok, actual = programs.run(gm, x)
            where = f"input {label} {tuple(x.shape)}"
            if ok:
                torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m, where=where: f"{where}: {m}")
                assert differs is None, f"{where}: eager decides {differs} differently, yet no guard fired"
            else:
                assert isinstance(actual, GuardError), f"{where}: {type(actual).__name__}: {actual}"
                assert differs is not None, f"{where}: a guard fired though eager decides as traced: {actual}"
                assert actual.where.startswith(f"{case.program.filename}:{differs.line}:"), (
                    f"{where}: guard at {actual.where}, but eager first differs at {differs}"
                )


class TestRefusals:
    """specfx refuses to trace exactly when the policy lacks a flag the example's path needs."""

    @FUZZ
    @given(data=st.data())
    def test_specialization_error_iff_a_needed_flag_is_missing(self, data):
        """A refusal names a flag of the first unmet need, at its line; without one, tracing succeeds."""
        case = draw_case(data)
        probe, _ = case.program.probe(case.plan, case.model, case.example)
        need = probe.first_unmet
        try:
            programs.trace_quietly(case, case.plan)
        except SpecializationError as error:
            assert need is not None, f"refused although the policy grants every need: {error}"
            assert error.flag in need.alternatives, f"needs one of {set(need.alternatives)}: {error}"
            assert error.location == f"{case.program.filename}:{need.line}", str(error)
            assert case.program.source.splitlines()[need.line - 1].strip() in str(error)
        else:
            assert need is None, f"traced although line {need.line} needs one of {set(need.alternatives)}"

    @settings(FUZZ, max_examples=40)
    @given(data=st.data())
    def test_an_example_eager_rejects_raises_the_same_error_when_traced(self, data):
        """With every flag, tracing on an empty batch raises what eager raises, or traces where eager runs."""
        case = draw_case(data, valid=False)
        case = dataclasses.replace(case, example=torch.zeros((0,) + tuple(case.example.shape[1:])))
        ok, outcome = programs.run(case.model, case.example)
        everything = programs.PolicyPlan(frozenset(programs.FLAGS), annotations=False)
        if ok:
            gm = programs.trace_quietly(case, everything)
            torch.testing.assert_close(programs.run(gm, case.example)[1], outcome, equal_nan=True)
        else:
            with pytest.raises(type(outcome)):
                programs.trace_quietly(case, everything)


class TestGuardsAreComplete:
    """Every specialization in ``gm.specializations`` has exactly one guard node, and vice versa."""

    @settings(FUZZ, max_examples=80)
    @given(data=st.data())
    def test_each_record_has_its_own_guard_node(self, data):
        """Records and guard nodes correspond one to one; each guard checks its record's node, by kind."""
        case = draw_case(data)
        gm, _, _ = traced(case)
        nodes = {node.name: node for node in gm.graph.nodes}
        uses = collections.Counter(s.guard for s in gm.specializations)
        for s in gm.specializations:
            assert uses[s.guard] == 1, f"{s.guard_description}: guard {s.guard!r} is shared"
            node = nodes.get(s.guard)
            assert node is not None and node in guard_nodes(gm), f"{s.guard_description}: no guard node"
            assert node.target is fuzz.GUARD_OF_KIND[s.kind] and node.args[0].name == s.node
        assert {n.name for n in guard_nodes(gm)} == set(uses), "guard nodes without a record"

    @settings(FUZZ, max_examples=80)
    @given(data=st.data())
    def test_records_are_the_decisions_made_at_their_source_lines(self, data):
        """The (line, flag, value) of the records are those of the decisions eager makes on the example."""
        case = draw_case(data)
        gm, _, probe = traced(case)
        lines = case.program.source.splitlines()
        for s in gm.specializations:
            assert s.location.filename == case.program.filename
            assert s.source == lines[s.location.lineno - 1].strip()
        recorded = {(s.location.lineno, s.flag, programs.canonical(s.value)) for s in gm.specializations}
        assert recorded == {(f.line, f.flag, f.value) for f in probe.facets}

    @settings(FUZZ, max_examples=30)
    @given(data=st.data())
    def test_guards_survive_deepcopy_dead_code_elimination_and_pickling(self, data):
        """A pruned deep copy and a pickled copy keep one guard per record and guard the same inputs."""
        case = draw_case(data)
        gm, _, _ = traced(case)
        pruned = copy.deepcopy(gm)
        pruned.graph.eliminate_dead_code()
        pruned.recompile()
        for other in (pruned, pickle.loads(pickle.dumps(gm))):
            checked = sorted(n.args[0].name for n in guard_nodes(other))
            assert checked == sorted(s.node for s in gm.specializations)
            assert [s.guard for s in other.specializations] == [s.guard for s in gm.specializations]
            for label, x in case.inputs:
                (ok, expected), (same_ok, actual) = programs.run(gm, x), programs.run(other, x)
                assert ok == same_ok, f"input {label}: {expected!r} vs {actual!r}"
                if ok:
                    torch.testing.assert_close(actual, expected, equal_nan=True)
                else:
                    assert type(actual) is type(expected)

    @settings(FUZZ, max_examples=30)
    @given(data=st.data())
    def test_guards_false_records_the_same_but_emits_no_guard_nodes(self, data):
        """With guards=False the same specializations are recorded, none has a guard, no guard node exists."""
        case = draw_case(data)
        guarded, plan, _ = traced(case)
        unguarded = programs.trace_quietly(case, plan, guards=False)
        assert guard_nodes(unguarded) == []
        assert all(s.guard is None for s in unguarded.specializations)
        assert [(s.kind, s.value, s.where) for s in unguarded.specializations] == [
            (s.kind, s.value, s.where) for s in guarded.specializations
        ]
        with torch.no_grad():
            expected = guarded(case.example.clone())
            torch.testing.assert_close(unguarded(case.example.clone()), expected, equal_nan=True)


class TestFuzzTool:
    """``tools/fuzz/run.py`` runs a corpus and reports its counts."""

    def test_json_counts_show_no_silent_mismatch_for_specfx(self):
        """A short run traces every program, classifies every input and finds no specfx mismatch."""
        out = io.StringIO()
        with redirect_stdout(out):
            status = fuzz.main(["--n", "12", "--seed", "7", "--json", "--jobs", "0"])
        result = json.loads(out.getvalue())
        counts = result["counts"]
        assert status == 0 and result["failures"] == []
        assert counts["programs"] == counts["programs traced"] == 12
        specfx_outcomes = ("agreed", "guarded", "silent mismatches", "other exceptions")
        assert counts["inputs"] == sum(counts.get(k, 0) for k in specfx_outcomes)
        assert counts.get("silent mismatches", 0) == counts.get("other exceptions", 0) == 0
        jit_outcomes = ("jit: agreed", "jit: silent mismatches", "jit: exceptions",
                        "jit: inputs not run (trace failed)")
        assert counts["inputs"] == sum(counts.get(k, 0) for k in jit_outcomes)

    def test_worker_processes_give_the_same_counts(self):
        """Counts do not depend on how programs are split among worker processes."""
        alone = fuzz.fuzz(6, 8, jit=False, jobs=0)["counts"]
        split = fuzz.fuzz(6, 8, jit=False, jobs=2, chunk=2)["counts"]
        del alone["seconds"], split["seconds"]  # wall time differs; every count must not
        assert alone == split and alone["programs"] == 6

    def test_json_is_all_that_is_printed(self, capfd, monkeypatch):
        """With --json, stdout is the JSON alone and nothing reaches stderr (so `--json ... 2>&1`
        parses): what torch, workers or generated code write to file descriptor 2 meanwhile is
        kept in the JSON's "stderr" entry."""
        import os
        import sys

        def noisy_fuzz(*args, **kwargs):
            sys.stderr.write("a Python warning\n")
            sys.stderr.flush()
            os.write(2, b"a C++ warning\n")
            return {"seed": 0, "grammar": "classes", "counts": {"programs": 0}, "failures": []}

        monkeypatch.setattr(fuzz, "fuzz", noisy_fuzz)
        assert fuzz.main(["--grammar", "classes", "--n", "1", "--json"]) == 0
        out, err = capfd.readouterr()
        assert err == ""
        result = json.loads(out)
        assert result["stderr"] == "a Python warning\na C++ warning\n" and result["counts"] == {"programs": 0}

    def test_class_grammar_table_prints_every_row_and_no_jit_column(self):
        """The class grammar's table: its refusals under Specialize.ALL and the graphs that returned
        where eager raised are rows; torch.jit.trace never ran, so it has no column."""
        out = io.StringIO()
        with redirect_stdout(out):
            fuzz.print_table({"seed": 0, "grammar": "classes", "failures": [],
                              "counts": {"programs": 3, "programs refused": 2, "graph returned where eager raised": 1}})
        table = out.getvalue()
        assert "jit.trace" not in table
        assert re.search(r"^  refused under Specialize\.ALL \(class grammar\) +2$", table, re.MULTILINE)
        assert re.search(r"^  of which the graph returned a value \(a failure\) +1$", table, re.MULTILINE)

    def test_same_seed_gives_the_same_corpus(self):
        """Program ``i`` of a seed is the same source every time, so reported failures reproduce."""
        assert fuzz.make_case(3, 5).program.source == fuzz.make_case(3, 5).program.source
        assert fuzz.make_case(3, 5).program.source != fuzz.make_case(3, 6).program.source


# Programs per family of the class grammar run by the suite (seed 5): enough that a planted bug
# in the family's answers is found (each is a mutant of `python -m tools.testing.mutation`,
# which checks that it is), few enough for the suite's time.
FAMILY_PROGRAMS = {"caught": 16, "properties": 32}


@pytest.mark.parametrize("family", sorted(classes.CLASSES), ids=lambda family: family.replace(" ", "-"))
def test_class_grammar_family_answers_as_eager_or_raises(family):
    """Programs of one family of the class grammar: every input agrees with eager, is guarded, or
    raises where eager raises; no silent mismatch, no crash, no graph answering where eager raised."""
    count = FAMILY_PROGRAMS.get(family, 12)
    result = fuzz.fuzz(count, 5, jit=None, jobs=0, family=family)
    counts = result["counts"]
    problems = [problem for failure in result["failures"] for problem in failure["problems"]]
    assert problems == [], "\n".join(problems[:5])
    assert counts["programs"] == count and counts["inputs"] > count
    assert counts.get("silent mismatches", 0) == counts.get("trace crashes", 0) == 0
    assert counts.get("graph returned where eager raised", 0) == 0
    assert counts.get("agreed", 0) > 0


@pytest.mark.parametrize("index", range(3))
def test_probe_needs_are_among_the_static_needs(index):
    """What the twin reports as needed on the example path is among the needs the generator noted."""
    case = fuzz.make_case(11, index)
    probe, _ = case.program.probe(case.plan, case.model, case.example)
    assert {n.alternatives for n in probe.needs} <= case.program.static_needs


# -- regressions: bugs found while fuzzing, fixed in specfx ----------------------------------------


def _chunk_sum(x: torch.Tensor) -> torch.Tensor:
    a, b = torch.chunk(x, 2)  # one specialization, so one guard node
    return a + b


class TestRegressions:
    """Reproducers of specfx bugs found by the fuzzer; each flips to XPASS (and fails) once fixed."""

    def test_guarded_graphs_do_not_pile_up_in_the_fx_wrap_registry(self):
        """Tracing many guarded graphs leaves torch.fx's wrap registry (walked by every trace) bounded."""
        from torch.fx import _symbolic_trace

        specfx.trace(_chunk_sum, torch.ones(4))
        before = len(_symbolic_trace._wrapped_fns_to_patch)
        for _ in range(20):
            specfx.trace(_chunk_sum, torch.ones(4))
        assert len(_symbolic_trace._wrapped_fns_to_patch) <= before + 1


class TestPromiseGrammar:
    """tools/fuzz/promise.py: outputs, gradients and writes against eager, per class of the promise;
    with a fix reverted, the fuzzer finds the planted silent answers (or the false refusals)."""

    N = 10  # programs per family and seed

    @pytest.mark.parametrize("family", sorted(promise.FAMILIES))
    def test_every_family_answers_as_eager_or_raises(self, family):
        result = promise.fuzz(self.N, seed=3, family=family)
        assert result["failures"] == [], result["failures"][:3]
        row = result["counts"][family]
        assert row["answered"] + row["guarded"] + row["refused"] == self.N - row["invalid"]

    @staticmethod
    def _revert(monkeypatch, fix):
        """Plant one bug: undo one fix of the promise for the duration of the test."""
        from specfx._capture import ambient, python_state, tracer, type_answers

        if fix == "autograd":  # custom Functions traced through: their backward is lost
            monkeypatch.setattr(tracer._autograd, "install", lambda session: None)
        elif fix == "ambient":  # process-wide settings baked as the trace saw them
            monkeypatch.setattr(ambient, "AMBIENT_GETTERS", ())
        elif fix == "rng":  # RNG control in forward no longer refused
            monkeypatch.setattr(ambient, "RNG_CONTROL", ())
            monkeypatch.setattr(ambient, "_DEVICE_RNG_CONTROL", ())
            monkeypatch.setattr(tracer.SpecTracer, "_refuse_generator_control", lambda *args: None)
        elif fix == "python state":  # globals and closures written in forward: put back, not refused
            monkeypatch.setattr(python_state.PythonState, "refused_changes", lambda self: [])
        elif fix == "input writes":  # writes to the containers forward is given: dropped
            monkeypatch.setattr(tracer.SpecTracer, "refuse_input_writes", lambda *args: None)
        elif fix == "builtins":  # type(x) no longer answered
            monkeypatch.setattr(type_answers.TypeAnswers, "shadow", lambda self, namespace: None)

    @pytest.mark.parametrize("family", ["autograd", "ambient", "rng", "python state", "input writes"])
    def test_a_reverted_fix_is_found_as_silent_answers(self, family, monkeypatch):
        self._revert(monkeypatch, family)
        result = promise.fuzz(self.N, seed=3, family=family)
        assert result["counts"][family]["silent"] > 0, result["counts"]

    def test_a_reverted_type_answer_is_found_as_refusals(self, monkeypatch):
        answered = promise.fuzz(self.N, seed=3, family="builtins")["counts"]["builtins"]
        self._revert(monkeypatch, "builtins")
        reverted = promise.fuzz(self.N, seed=3, family="builtins")["counts"]["builtins"]
        assert reverted["refused"] > answered["refused"], (answered, reverted)


class TestProbeOracle:
    """The instrumented twin's bookkeeping, on fixed inputs (no hypothesis draws)."""

    def test_two_empty_tuples_iterated_at_two_lines_are_two_decisions(self):
        """``zip(parts, parts[1:])`` over one-element ``parts`` at two lines: both empty slices are
        decided (the tracer records one per graph node), though CPython shares one ``()`` object."""
        probe = programs.Probe(programs.PolicyPlan(frozenset(programs.FLAGS), annotations=False), {})
        first, second = (torch.zeros(1),), (torch.ones(1),)
        for line, parts in ((10, first), (19, second)):
            list(zip(probe.iter(line, parts), probe.iter(line, parts[1:])))
        facets = {(f.line, f.flag, f.value) for f in probe.facets}
        iter_len = specfx.Specialize.ITER_LEN
        assert facets == {(line, iter_len, programs.canonical(n)) for line in (10, 19) for n in (1, 0)}
