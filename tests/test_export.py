"""specfx.export: specialized graphs as torch.export programs whose guards survive export,
run_decompositions, torchao PT2E prepare/convert and ep.module(); torch.compile without
graph breaks at guards."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn
from torch.export import Dim

import specfx
from specfx import GuardError, Policy, SpecializationError, SpecializationWarning
from specfx.integrations.export import LOWERINGS, lower_guards
from specfx.guards import GUARDS

from tools.peers import export_routes as compare  # the models of the docs' table
from tools.zoo import run as zoo
DataBranch, Router = compare.DataBranch, compare.Router

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
xiq = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")

pytestmark = [
    # torch's own pytree notice while run_decompositions copies the program (torch 2.13)
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]

SPECFX_MESSAGE = r"specfx guard failed: the graph was specialized assuming"
# SQNR of the quantized program against float, on fresh inputs from the calibration distribution
SQNR_DB = 15.0


def quantize(program: torch.export.ExportedProgram, calibration, kwargs=None) -> torch.nn.Module:
    """torchao PT2E: X86InductorQuantizer, prepare_pt2e, calibrate, convert_pt2e."""
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = pt2e.prepare_pt2e(program.module(), quantizer)
    with torch.no_grad():
        for args in calibration:
            prepared(*args, **(kwargs or {}))
    return pt2e.convert_pt2e(prepared)


def sqnr(reference: torch.Tensor, output: torch.Tensor) -> float:
    return float(20 * torch.log10(reference.norm() / (output - reference).norm()))


def stages(program: torch.export.ExportedProgram, calibration):
    """The program as users run it after each stage: ep.module(), run_decompositions, PT2E."""
    return {
        "export": program.module(),
        "decomposed": program.run_decompositions().module(),
        "pt2e": quantize(program, calibration),
    }


# -- models --------------------------------------------------------------------------------


class ShapePredicate(nn.Module):
    """A branch on a size (BOOL keeps it symbolic): checked on the exported dynamic dim."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 1:
            x = x - x.mean(dim=0, keepdim=True)
        return self.lin(x)


class Scalars(nn.Module):
    """int(), operator.index (range), .item(), float() and .tolist() of data."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        out = x
        for _ in range(x[:, 3].gt(0).sum()):           # index
            out = out * 1.5
        out = out * int(x[0, 0] > 0)                   # int
        out = self.lin(out + float(x[0, 1].round()))   # float
        columns = torch.nonzero(x[2] > 0).flatten().tolist()  # tolist
        return out[:, columns] * x[1, 1].sign().item()  # item


class Rows(nn.Module):
    """Iterates over the rows of a data-dependent tensor (len of a tensor)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        total = torch.zeros(4)
        for row in torch.nonzero(x > 0):
            total = total + row.float().sum()
        return self.lin(x) + total


class Shapes(nn.Module):
    """Reads sizes under SHAPES; chunks and unpacks; creates a tensor of the input's dtype."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        dtype = x.dtype  # kept in a name: a decision (a dtype passed straight to an op is not one)
        scale = torch.ones(1, dtype=dtype) * x.size(0)
        a, b = torch.chunk(self.lin(x), 2)
        return torch.cat([a, b]).view(x.size(0), -1) * scale


class _Scaled:
    scale = 2.0


# guard kind -> (arguments that keep the assumption, arguments that break it): the value, then the
# guard's expected arguments
LOWERING_CASES = {
    "iter": ((torch.ones(3), 3), (torch.ones(2), 3)),
    "unpack": (([1, 2], 2), ([1, 2, 3], 2)),
    "len": ((torch.ones(3), 3), (torch.ones(4), 3)),
    "bool": ((torch.tensor(False), False), (torch.tensor(True), False)),
    "shape": ((torch.ones(2, 3), (2, 3)), (torch.ones(2, 2), (2, 3))),
    "size": ((torch.ones(2, 3), 1, 3), (torch.ones(2, 4), 1, 3)),
    "ndim": ((torch.ones(2), 1), (torch.ones(2, 2), 1)),
    "numel": ((torch.ones(2, 3), 6), (torch.ones(2, 2), 6)),
    "int": ((torch.tensor(2.7), 2), (torch.tensor(3.1), 2)),
    "index": ((torch.tensor(2), 2), (torch.tensor(1), 2)),
    "float": ((torch.tensor(0.5), 0.5), (torch.tensor(-0.5), 0.5)),
    "item": ((torch.tensor(-0.0), -0.0), (torch.tensor(0.0), -0.0)),
    "tolist": ((torch.tensor([1.0, 2.0]), [1.0, 2.0]), (torch.tensor([1.0, 3.0]), [1.0, 2.0])),
    "keys": (({"a": 1}, ("a",)), ({"b": 1}, ("a",))),
    "dtype": ((torch.ones(2), torch.float32), (torch.ones(2, dtype=torch.float64), torch.float32)),
    "device": ((torch.ones(2), torch.device("cpu")), (torch.ones(2, device="meta"), torch.device("cpu"))),
    "layout": ((torch.ones(2), "torch.strided"), (torch.ones(2).to_sparse(), "torch.strided")),
    "is_none": ((None, True), (torch.ones(2), True)),
    "is_tensor": ((torch.ones(2), True), (2.0, True)),
    "type": ((torch.ones(2), "torch.Tensor"), (2.0, "torch.Tensor")),
    "value": ((2, 2), (2.0, 2)),
    "grad_enabled": ((True, True), (False, True)),
    "has_attr": ((_Scaled(), "scale", True), (object(), "scale", True)),
}


def calibration_of(example, count=4):
    generator = torch.Generator().manual_seed(1)
    return [tuple(t + 0.01 * torch.randn(t.shape, generator=generator) for t in example) for _ in range(count)]


# -- the API --------------------------------------------------------------------------------


class TestExport:
    def test_returns_an_exported_program_equal_to_eager(self):
        """specfx.export returns an ExportedProgram whose module computes what eager does."""
        model, x = DataBranch().eval(), torch.randn(2, 8) + 2
        program = specfx.export(model, (x,), policy=Policy(bool=True))
        assert isinstance(program, torch.export.ExportedProgram)
        torch.testing.assert_close(program.module()(x), model(x))

    def test_undecided_dims_are_dynamic(self):
        """Traced on batch 2 with Policy(iter=True, bool=True), the program runs batch 5."""
        model, x = ShapePredicate().eval(), torch.randn(2, 4)
        program = specfx.export(model, (x,), policy=Policy(iter=True, bool=True))
        y = torch.randn(5, 4)
        torch.testing.assert_close(program.module()(y), model(y))

    def test_explicit_dynamic_shapes(self):
        """dynamic_shapes is passed to torch.export; None exports every dim static."""
        model, x = ShapePredicate().eval(), torch.randn(3, 4)
        program = specfx.export(model, (x,), policy=Policy(bool=True),
                                dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}})
        torch.testing.assert_close(program.module()(torch.ones(7, 4)), model(torch.ones(7, 4)))
        static = specfx.export(model, (x,), policy=Policy(bool=True), dynamic_shapes=None)
        with pytest.raises(AssertionError, match=r"x.size\(\)\[0\] == 3"):
            static.module()(torch.ones(7, 4))

    def test_decided_dims_are_static(self):
        """A dimension a SHAPES decision baked in is exported static; the module checks it at
        entry with specfx's GuardError (the decision's line), before export's own check."""
        model, x = Shapes().eval(), torch.randn(4, 4)
        program = specfx.export(model, (x,), policy=Policy(shapes=True))
        with pytest.raises(GuardError, match=r"assuming x.size\(0\) == 4, but for this input x.size\(0\) == 6"):
            program.module()(torch.randn(6, 4))

    def test_policy_that_grants_nothing_fails_before_export(self, monkeypatch):
        """The usual SpecializationError, raised by the trace; torch.export never runs."""
        monkeypatch.setattr(torch.export, "export", lambda *a, **k: pytest.fail("export ran"))
        with pytest.raises(SpecializationError, match=r"Fix: pass policy=Policy\(bool=True\)"):
            specfx.export(DataBranch().eval(), (torch.randn(2, 8),))

    def test_guards_false_warns_what_is_lost(self):
        """guards=False exports no checks and names each unchecked decision."""
        model, x = DataBranch().eval(), torch.randn(2, 8) + 2
        with pytest.warns(SpecializationWarning, match=r"(?s)guards=False.*1 decision.*bool\(.*\) == True at .*export_routes.py"):
            program = specfx.export(model, (x,), policy=Policy(bool=True), guards=False)
        assert not any("assert" in str(n.target) for n in program.graph.nodes)

    def test_needs_example_inputs(self):
        with pytest.raises(TypeError, match="needs example inputs"):
            specfx.export(DataBranch())

    def test_every_guard_kind_has_a_lowering(self):
        """No guard kind can reach export without an export-native form (each one checks:
        see test_each_lowering_passes_what_its_guard_passes_and_fails_what_it_fails)."""
        assert set(LOWERINGS) == set(GUARDS) == set(LOWERING_CASES)
        gm = specfx.trace(DataBranch().eval(), torch.randn(2, 8), policy=Policy(bool=True))
        targets = [n.target for n in lower_guards(gm).graph.nodes if n.op == "call_function"]
        assert LOWERINGS["bool"] in targets and not set(GUARDS.values()) & set(targets)


    @pytest.mark.parametrize("kind", sorted(LOWERING_CASES))
    def test_each_lowering_passes_what_its_guard_passes_and_fails_what_it_fails(self, kind):
        """Run outside export, a lowered check is its guard: silent on an input that keeps
        the assumption, raising on one that breaks it (as the Python guard does)."""
        holds, breaks = LOWERING_CASES[kind]
        GUARDS[kind](*holds, "v", "model.py:1")
        LOWERINGS[kind](*holds, "v", "model.py:1")
        with pytest.raises(GuardError):
            GUARDS[kind](*breaks, "v", "model.py:1")
        with pytest.raises(RuntimeError):  # GuardError, or aten._assert_async's RuntimeError
            LOWERINGS[kind](*breaks, "v", "model.py:1")


# -- guards after export, run_decompositions and PT2E convert -------------------------------


def _fires(module, args, match, error=RuntimeError):
    with pytest.raises(error, match="(?s)" + match):
        with torch.no_grad():
            module(*args)


SCALARS_MODEL = Scalars().eval()
SCALARS_INPUT = torch.tensor([[1.0, 2.0, 3.0, -4.0], [5.0, 6.0, -7.0, 8.0], [1.0, -2.0, 3.0, 4.0]])


@functools.lru_cache(maxsize=None)
def _scalars_stages():
    """One export and one PT2E round trip of Scalars, shared by the per-kind tests."""
    x = SCALARS_INPUT
    traced = specfx.trace(SCALARS_MODEL, (x,), policy=Policy(scalars=True))
    assert {"index", "int", "float", "tolist", "item"} <= {s.kind for s in traced.specializations}
    return stages(specfx.export(SCALARS_MODEL, (x,), policy=Policy(scalars=True)), calibration_of((x,), 2))


class TestGuardsSurvive:
    """Each guard kind fires in ep.module(), after run_decompositions and after PT2E convert."""

    def test_bool_on_data(self):
        model, x = DataBranch().eval(), torch.randn(2, 8) + 2
        program = specfx.export(model, (x,), policy=Policy(bool=True))
        for module in stages(program, calibration_of((x,))).values():
            torch.testing.assert_close(module(x), model(x), atol=0.2, rtol=0.1)
            _fires(module, (torch.randn(3, 8) - 5,), SPECFX_MESSAGE + r" bool\(.*\) == True.*if x.mean\(\) > 0")

    def test_bool_on_a_size(self):
        model, x = ShapePredicate().eval(), torch.randn(3, 4)
        program = specfx.export(model, (x,), policy=Policy(bool=True))
        for module in stages(program, calibration_of((x,))).values():
            _fires(module, (torch.randn(1, 4),), SPECFX_MESSAGE + r" bool\(.*\) == True.*if x.shape\[0\] > 1")

    @pytest.mark.parametrize("kind, changes", [
        ("index", {(2, 3): -1.0}),
        ("int", {(0, 0): -1.0}),
        ("float", {(0, 1): 3.0}),
        ("tolist", {(2, 1): 2.0, (2, 2): -3.0}),
        ("item", {(1, 1): -1.0}),
    ])
    def test_scalars(self, kind, changes):
        changed = SCALARS_INPUT.clone()
        for position, value in changes.items():
            changed[position] = value
        for module in _scalars_stages().values():
            torch.testing.assert_close(module(SCALARS_INPUT), SCALARS_MODEL(SCALARS_INPUT), atol=0.3, rtol=0.1)
            _fires(module, (changed,), SPECFX_MESSAGE + rf" .*# {kind} ")

    def test_a_number_of_another_type_fails(self):
        """`x * x.sum().item()` traced on float64 bakes in a float: an int64 input (the same
        number, another Python type, so eager returns int64) fails the exported program's
        dtype check, and under torch.compile the guard, instead of returning floats."""

        def scale(x):
            return x * x.sum().item()

        example, other = torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.int64)
        program = specfx.export(scale, (example,), policy=Policy(scalars=True))
        torch.testing.assert_close(program.module()(example), scale(example))
        _fires(program.module(), (other,), r"Tensor dtype mismatch! Expected: Double, Got: long int")
        gm = specfx.trace(scale, (example,), policy=Policy(scalars=True))
        torch._dynamo.reset()
        compiled = torch.compile(gm, backend="eager")
        torch.testing.assert_close(compiled(example), scale(example))
        with pytest.raises(GuardError, match=r"assuming type\(x.sum\(\).item\(\)\) is float, "
                                             r"but for this input type\(x.sum\(\).item\(\)\) is int"):
            compiled(other)

    def test_len_of_a_data_dependent_tensor(self):
        model, x = Rows().eval(), torch.tensor([[1.0, -1.0, 2.0, -3.0]] * 2)
        program = specfx.export(model, (x,), policy=Policy(iter=True))
        for module in stages(program, calibration_of((x,), 1)).values():
            _fires(module, (torch.ones(2, 4),), SPECFX_MESSAGE + r" len\(.*\) == 4")

    def test_shapes_unpack_and_dtype(self):
        """Decided sizes, the dtype and an input traced as None are checked at the module's entry,
        in specfx's words, at every stage (export, run_decompositions, PT2E)."""
        model, x = Shapes().eval(), torch.randn(4, 4)
        program = specfx.export(model, (x,), policy=Policy(shapes=True))
        kinds = {s.kind for s in specfx.trace(model, (x,), policy=Policy(shapes=True)).specializations}
        assert {"unpack", "size", "dtype", "is_none"} <= kinds
        for module in stages(program, calibration_of((x,), 1)).values():
            _fires(module, (torch.randn(6, 4),), r"assuming x.size\(0\) == 4, but for this input x.size\(0\) == 6",
                   GuardError)
            _fires(module, (x.double(),), r"assuming x.dtype == torch.float32, but for this input x.dtype == "
                                          r"torch.float64", GuardError)
            _fires(module, (x, torch.ones(4)), r"assuming mask is None, but for this input mask is not None",
                   GuardError)


# -- PT2E end to end on models torch.export alone cannot export ------------------------------


class TestPT2E:
    def _round_trip(self, model, example, fresh, policy, violating, match, kwargs=None, min_sqnr=SQNR_DB):
        program = specfx.export(model, example, kwargs, policy=policy)
        quantized = quantize(program, [example] + fresh[:-1])
        with torch.no_grad():
            reference, output = model(*fresh[-1]), quantized(*fresh[-1])
        if hasattr(reference, "last_hidden_state"):
            reference = reference.last_hidden_state
        measured = sqnr(reference, output)
        print(f"{type(model).__name__}: SQNR {measured:.1f} dB")
        assert measured > min_sqnr
        _fires(quantized, violating, match)
        return measured

    def test_data_dependent_branch(self):
        torch.manual_seed(0)
        model, x = DataBranch().eval(), torch.randn(4, 8) + 2
        self._round_trip(model, (x,), [(torch.randn(8, 8) + 2,) for _ in range(4)], Policy(bool=True),
                         (torch.randn(2, 8) - 5,), SPECFX_MESSAGE)

    def test_moe_router(self):
        torch.manual_seed(0)
        model = Router().eval()
        x = torch.randn(16, 8)  # (torch.export alone fails on it: tests/test_premises.py)
        # the experts used are decided on the example: inputs routed to the same experts run;
        # an input routed to as many experts, but other ones, fails the tolist() guard
        fresh = [(x + 0.001 * torch.randn_like(x),) for _ in range(3)]
        used = torch.unique(model.gate(x).argmax(-1)).tolist()
        other = next(y for y in (torch.randn(16, 8) for _ in range(100))
                     if len(set(model.gate(y).argmax(-1).tolist())) == len(used)
                     and torch.unique(model.gate(y).argmax(-1)).tolist() != used)
        self._round_trip(model, (x,), fresh, Policy(iter=True, scalars=True), (other,),
                         SPECFX_MESSAGE + r" .*tolist\(\) == \[.*for index in torch.unique\(choice\).tolist\(\)")

    def test_transformers_mixtral(self):
        """Mixtral (tiny random config): torch.export fails in its expert loop (tests/test_premises.py),
        specfx exports it, PT2E quantizes it and the routing guard still fires."""
        pytest.importorskip("transformers")
        model = compare.tiny_mixtral()
        ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
        mask = torch.ones(2, 8, dtype=torch.long)
        self._round_trip(model, (ids, mask), [(ids, mask)] * 2, Policy(iter=True, bool=True, scalars=True),
                         (torch.zeros(2, 8, dtype=torch.long), mask),
                         # as many experts hit (specfx's message) or another count (export's own check)
                         f"{SPECFX_MESSAGE}|Runtime assertion failed for expression")

    # hf-vit: a decorated forward with **kwargs, traced through its wrapper
    @pytest.mark.parametrize("name", ["hf-bert", "hf-distilbert", "hf-vit"])
    def test_transformers_zoo(self, name):
        """Two zoo transformers: exported with the zoo's inputs, quantized, guards kept."""
        pytest.importorskip("transformers")
        built = zoo.CASES_BY_NAME[name].build()
        args, kwargs = built.example
        program = specfx.export(built.model, args, kwargs or None, policy=Policy(bool=True))
        quantized = quantize(program, [args], kwargs)
        with torch.no_grad():  # the zoo's roots are the models as called: compare their first output
            reference = zoo.tensors_of(built.model(*args, **kwargs))[0]
            measured = sqnr(reference, zoo.tensors_of(quantized(*args, **kwargs))[0])
        print(f"{name}: SQNR {measured:.1f} dB")
        assert measured > SQNR_DB
        assert any("_assert" in str(node.target) for node in quantized.graph.nodes)


# -- torch.compile ---------------------------------------------------------------------------


class TestCompile:
    @pytest.mark.parametrize("dynamic", [None, True])
    @pytest.mark.parametrize("model, example, policy, violating", [
        (DataBranch, torch.randn(2, 8) + 2, Policy(bool=True), torch.randn(2, 8) - 5),
        (Scalars, SCALARS_INPUT, Policy(scalars=True), -SCALARS_INPUT),
        (ShapePredicate, torch.randn(3, 4), Policy(bool=True), torch.randn(1, 4)),
    ])
    def test_no_graph_break_at_guards(self, model, example, policy, violating, dynamic):
        """torch.compile of a specfx graph compiles the guards in: no graph break, and they fire."""
        torch.manual_seed(0)
        module = model().eval()
        gm = specfx.trace(module, (example,), policy=policy)
        torch._dynamo.reset()
        # nonzero (Scalars' own code, not a guard) has a data-dependent shape: let dynamo capture it
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            explanation = torch._dynamo.explain(gm)(example)
            assert explanation.graph_break_count == 0, explanation.break_reasons
            compiled = torch.compile(gm, backend="aot_eager", dynamic=dynamic)
            with torch.no_grad():
                torch.testing.assert_close(compiled(example), module(example))
                with pytest.raises((GuardError, RuntimeError), match="specfx guard failed"):
                    compiled(violating)
