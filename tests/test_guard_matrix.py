"""Every guard kind survives every tool a specfx graph meets (tools/peers/guard_matrix.py).

Each cell traces a one-decision model, hands the graph (or, for export, the model) to a
tool, and calls the result with an input that takes the traced path (eager's result) and
one that breaks the decision (specfx's GuardError or message, eager's result, or the tool
refused when applied in specfx's words). tools.peers.guard_matrix.EXPECTED_OTHERWISE names the
cells that do something else, which docs/guarantees.md shows as known gaps.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest

import specfx
from tools.peers import guard_matrix
from tools.peers.guard_matrix import CASES, TOOLS, expected, measure

pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
pytest.importorskip("brevitas.graph.quantize")

# Inductor compiles each graph in C++ (seconds per cell): a sample, one per family of
# checks (a data guard, a metadata guard, a type guard, an ambient read, the try/except
# mark, the entry); compile (eager) runs every kind through dynamo.
INDUCTOR_SAMPLE = frozenset({"bool: data", "bool: contiguity", "type: Parameter", "grad mode",
                             "try/except mark", "entry structure", "tolist"})
# kinds no trace makes any more: guard_is_tensor stays for graphs saved by 0.1
# (isinstance(x, Tensor) is a `type` decision since)
NOT_MADE_BY_TRACES = frozenset({specfx.GuardKind.IS_TENSOR})

CELLS = [pytest.param(c, tool, id=f"{c.name}|{tool}") for c in CASES for tool in TOOLS
         if tool != "compile (inductor)" or c.name in INDUCTOR_SAMPLE]


@pytest.mark.parametrize("case, tool", CELLS)
def test_cell(case, tool):
    verdict, what = measure(case, tool)
    assert verdict == expected(case.name, tool), what


def test_every_guard_kind_has_a_row():
    """A new GuardKind fails here until the matrix has a case that makes it."""
    kinds = {c.kind for c in CASES}
    missing = {kind.value for kind in specfx.GuardKind} - kinds - {k.value for k in NOT_MADE_BY_TRACES}
    assert not missing, f"add a case to tools/peers/guard_matrix.py for: {sorted(missing)}"


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.name)
def test_case_makes_its_kind(c):
    """Each row's model makes the decision it is named after (a try/except mark, the entry check,
    or a guard of that kind)."""
    model = c.model()
    args, kwargs, _ = c.same()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", specfx.SpecializationWarning)  # (keys: a one-key dict)
        gm = specfx.trace(model, args, kwargs or None, policy=c.policy, **c.options)
    if c.kind == "caught":
        assert any("specfx_caught" in node.meta for node in gm.graph.nodes)
    elif c.kind != "structure":
        assert c.kind in {str(record.kind) for record in gm.specializations}


def test_page_shows_the_matrix():
    """docs/guarantees.md's table is rendered from the expected verdicts this test checks."""
    assert guard_matrix.main(["--check"]) == 0, "run python -m tools.peers.guard_matrix --write"


def _case(name):
    return next(c for c in CASES if c.name == name)


def _breaking_error(name, tool):
    c = _case(name)
    model = c.model()
    args, kwargs, _ = c.same()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (deprecations of torch.ao, Brevitas' notices)
        gm = specfx.trace(model, args, kwargs or None, policy=c.policy, **c.options)
        applied = TOOLS[tool](c, model, gm, args, kwargs)
    broken_args, broken_kwargs, under = c.broken()
    try:
        with under() if under is not None else contextlib.nullcontext():
            applied(*broken_args, **broken_kwargs)
    except Exception as error:  # (any class: each test pins the one it expects)
        return error
    pytest.fail(f"{name} under {tool}: the breaking input raised nothing")


class TestMessages:
    """The words of the checks the matrix counts: the assumption, this input's value, the user's line."""

    def test_exported_metadata_check_names_the_value(self):
        error = _breaking_error("bool: contiguity", "export().module()")
        assert isinstance(error, specfx.GuardError)
        assert ("assuming bool(x.is_contiguous()) == True, but for this input bool(x.is_contiguous()) == False"
                in str(error))
        assert "guard_matrix.py" in error.location and "x.is_contiguous()" in error.location

    def test_exported_type_and_grad_mode_checks(self):
        message = str(_breaking_error("type: Parameter", "PT2E"))
        assert ("assuming type(x) is torch.Tensor, but for this input type(x) is torch.nn.parameter.Parameter"
                in message)  # (the model's name for it, not `instance` of nn.Parameter's own isinstance check)
        message = str(_breaking_error("grad mode", "PT2E"))
        assert "assuming torch.is_grad_enabled() == True, but for this input torch.is_grad_enabled() == False" in message

    def test_export_input_check_is_translated(self):
        """export fixed the batch from the split count: its AssertionError, in specfx's words."""
        error = _breaking_error("unpack", "export().module()")
        assert isinstance(error, specfx.GuardError) and isinstance(error, AssertionError)
        assert "exported assuming (1 + x.size()[0]) // 2 == 2, which this input breaks" in str(error)
        assert "decisions on `x`:\n  len(x.split(2)) == 2 at tools/peers/guard_matrix.py:" in str(error)

    def test_export_entry_names_the_input(self):
        error = _breaking_error("is None: positional", "PT2E")
        assert isinstance(error, specfx.GuardError) and "mask is None" in str(error)

    def test_export_refuses_a_leaf_that_branches_on_data(self):
        c = _case("keys")
        with warnings.catch_warnings(), pytest.raises(specfx.SpecializationError,
                                                      match=r"the leaf modules: router \(Router\)"):
            warnings.simplefilter("ignore", specfx.SpecializationWarning)  # (a one-key dict)
            specfx.export(c.model(), c.same()[0], policy=c.policy, **c.options)

    def test_compiled_try_block_reaches_the_handler_check(self):
        error = _breaking_error("try/except mark", "compile (eager)")
        assert isinstance(error, specfx.GuardError) and "inside a try block" in str(error)

    def test_brevitas_refuses_a_graph_with_try_marks(self):
        with pytest.raises(specfx.SpecializationError, match=r"cannot re-trace this graph: `x.view\(-1, 3\)`"):
            _breaking_error("try/except mark", "Brevitas re-trace")
