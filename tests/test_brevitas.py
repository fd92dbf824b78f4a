"""Brevitas' graph PTQ recipe on specfx graphs (real brevitas, no mocks): guards stay in the
quantized graph and fire, explain works, the quantized model is close to the float one."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import GuardError, Policy
from tests.models import SplitCat

# Brevitas 0.13.4's own import and tracing notices (its fx copy is deprecated; an optional
# kernel package is missing; its vendored tracer reads a torch pytree attribute torch deprecates).
pytestmark = [
    pytest.mark.filterwarnings("ignore:brevitas.fx is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:fast_hadamard_transform package not found:UserWarning"),
    pytest.mark.filterwarnings("ignore:`treespec.children_specs` is deprecated:FutureWarning"),
]

brevitas_quantize = pytest.importorskip("brevitas.graph.quantize")
from brevitas.backport.fx.graph_module import GraphModule as BrevitasGraphModule  # noqa: E402
from brevitas.graph.calibrate import bias_correction_mode, calibration_mode  # noqa: E402

from specfx.brevitas import to_brevitas_graph  # noqa: E402

SQNR_DB = 25.0  # quantized vs float on fresh inputs from the calibration distribution


class ConvSplitCat(nn.Module):
    """The seed (split -> *args -> cat) between two convolutions, so Brevitas has layers to quantize."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 8, 3, padding=1)

    def call_cat(self, *args):
        return torch.cat(args, dim=1)

    def forward(self, x):
        x = torch.split(self.stem(x), 2, dim=1)
        return self.head(self.call_cat(*x))


class Gated(nn.Module):
    """A branch on the data: dark images get an extra convolution."""

    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU()
        self.pre = nn.Conv2d(3, 3, 3, padding=1)
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 8, 1)

    def forward(self, x):
        if torch.mean(x) < 1.0:
            x = self.relu(self.pre(x))
        return self.head(self.relu(self.stem(x)))


def batches(count: int = 3, channels: int = 3, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(4, channels, 8, 8, generator=generator) for _ in range(count)]


def sqnr(reference: torch.Tensor, output: torch.Tensor) -> float:
    return float(20 * torch.log10(reference.norm() / (output - reference).norm()).detach())


def brevitas_ptq(graph, data, **preprocess_options):
    """Brevitas' documented graph PTQ recipe, unchanged: preprocess, quantize, calibrate, correct bias."""
    graph = brevitas_quantize.preprocess_for_quantize(graph, **preprocess_options)
    quantized = brevitas_quantize.quantize(graph)
    with torch.no_grad(), calibration_mode(quantized):
        for batch in data:
            quantized(batch)
    with torch.no_grad(), bias_correction_mode(quantized):
        for batch in data:
            quantized(batch)
    return quantized


def guard_targets(gm) -> list:
    return [node.target.__name__ for node in gm.graph.nodes if node.op == "call_function"
            and node.target.__name__.startswith("guard_")]


def input_quantizer(quantized) -> str:
    """The qualified name of the quantizer Brevitas put on the graph's input."""
    (placeholder,) = [node for node in quantized.graph.nodes if node.op == "placeholder"]
    (user,) = placeholder.users
    return user.target


def trace_and_quantize(model_class, policy):
    """(float model, its specfx graph, the graph through Brevitas' recipe)."""
    torch.manual_seed(0)
    model = model_class().eval()
    gm = specfx.trace(model, torch.randn(2, 3, 8, 8), policy=policy)
    return model, gm, brevitas_ptq(copy.deepcopy(gm), batches())


@pytest.fixture(scope="module")
def seed():
    return trace_and_quantize(ConvSplitCat, Policy(iter=True))


@pytest.fixture(scope="module")
def gated():
    return trace_and_quantize(Gated, Policy(bool=True))


def test_import_specfx_does_not_import_brevitas():
    """`import specfx` leaves Brevitas unimported; only specfx.brevitas imports it."""
    code = "import sys, specfx; assert 'brevitas' not in sys.modules; specfx.trace(lambda x: x, 1.0)"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestRecipe:
    def test_readme_seed(self):
        """The README's split -> *args -> cat model goes through the unchanged recipe; its guard fires."""
        model = SplitCat().eval()
        gm = specfx.trace(model, torch.randn(1, 4, 10, 10), policy=Policy(iter=True))
        quantized = brevitas_ptq(copy.deepcopy(gm), batches(channels=4))
        assert isinstance(quantized, BrevitasGraphModule)
        assert guard_targets(quantized) == ["guard_len"]
        x = torch.randn(3, 4, 5, 5, generator=torch.Generator().manual_seed(2))
        assert sqnr(model(x), quantized(x)) > SQNR_DB
        with pytest.raises(GuardError, match=r"len\(x\) == 2.*len\(x\) == 3"):
            quantized(torch.randn(1, 6, 5, 5))

    def test_seed_error_and_guard(self, seed):
        """Split -> cat between convs: close to float; the 6-channel input the float model rejects
        is refused by the guard, not run."""
        model, _, quantized = seed
        (x,) = batches(1, seed=2)  # fresh inputs from the calibration distribution
        with torch.no_grad():
            assert sqnr(model(x), quantized(x)) > SQNR_DB
        assert guard_targets(quantized) == ["guard_len"]
        quantized = copy.deepcopy(quantized)
        quantized.stem = nn.Conv2d(3, 6, 3, padding=1)  # the split now gives 3 chunks
        with pytest.raises(GuardError, match=r"len\(x\) == 2"):
            quantized(x)

    def test_branch_error_and_guard(self, gated):
        """A data-dependent branch: inputs that keep it run close to float, one that takes the
        other branch in the float model fires the guard."""
        model, gm, quantized = gated
        (record,) = gm.specializations
        assert record.kind == "bool" and record.value is True
        (x,) = batches(1, seed=2)  # fresh inputs from the calibration distribution
        with torch.no_grad():
            assert sqnr(model(x), quantized(x)) > SQNR_DB
        with pytest.raises(GuardError, match=r"if torch.mean\(x\) < 1.0"):
            quantized(torch.randn(1, 3, 8, 8) + 2.0)

    def test_explain_and_deepcopy(self, gated):
        """explain reads the quantized Brevitas graph and its deep copy (from the guard nodes)."""
        _, _, quantized = gated
        for graph in (quantized, copy.deepcopy(quantized)):
            report = specfx.explain(graph)
            assert report.startswith("specfx: 1 specialization") and "if torch.mean(x) < 1.0" in report
            assert guard_targets(graph) == ["guard_truth"]

    def test_dead_code_elimination_keeps_guards(self, seed):
        """Brevitas' fx copy counts the guards as side-effectful."""
        _, _, quantized = seed
        graph = copy.deepcopy(quantized)
        graph.graph.eliminate_dead_code()
        graph.recompile()
        assert guard_targets(graph) == ["guard_len"]

    @settings(max_examples=20, deadline=None)
    @given(offset=st.floats(-1.0, 3.0), batch=st.integers(1, 3), size=st.integers(3, 9))
    def test_branch_guard_or_close(self, gated, offset, batch, size):
        """The guard checks the quantized graph's own predicate (the mean of the quantized input):
        it raises exactly when that takes the other branch, and otherwise the output is close to
        float wherever the float model takes the same branch."""
        model, _, quantized = gated
        x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(size)) + offset
        with torch.no_grad():
            quantized_input = quantized.get_submodule(input_quantizer(quantized))(x)
            if not torch.mean(quantized_input) < 1.0:
                with pytest.raises(GuardError):
                    quantized(x)
            elif torch.mean(x) < 1.0 and offset < 0.5:  # inside the input quantizer's range
                assert sqnr(model(x), quantized(x)) > SQNR_DB - 5


    def test_shape_guards_on_quant_tensors(self):
        """Guards whose subject becomes a QuantTensor (between quantized layers) check its shape."""

        class Flatten(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)
                self.fc = nn.Linear(4 * 6 * 6, 5)

            def forward(self, x):
                x = self.conv(x)
                return self.fc(x.reshape(x.shape[0], x.shape[1] * x.shape[2] * x.shape[3]))

        torch.manual_seed(0)
        model = Flatten().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 8, 8), policy=Policy(shapes=True))
        quantized = brevitas_ptq(copy.deepcopy(gm), [batch[:2] for batch in batches()])
        assert guard_targets(quantized) == ["guard_size"] * 4
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            assert sqnr(model(x), quantized(x)) > SQNR_DB
        with pytest.raises(GuardError, match=r"x.size\(0\) == 2.*x.size\(0\) == 3"):
            quantized(torch.randn(3, 3, 8, 8))


class TestLayerwise:
    def test_seed_and_branch(self, seed, gated):
        """layerwise_quantize keeps the torch.fx graph: guards fire, records survive deepcopy."""
        for model, gm, _ in (seed, gated):
            quantized = brevitas_quantize.layerwise_quantize(copy.deepcopy(gm))
            with torch.no_grad(), calibration_mode(quantized):
                for batch in batches():
                    quantized(batch)
            (x,) = batches(1, seed=2)  # fresh inputs from the calibration distribution
            with torch.no_grad():
                assert sqnr(model(x), quantized(x)) > SQNR_DB
            assert copy.deepcopy(quantized).specializations == gm.specializations
        with pytest.raises(GuardError):
            quantized(torch.randn(1, 3, 8, 8) + 2.0)


class TestToBrevitasGraph:
    def test_recipe_without_retrace(self, gated):
        """trace_model=False on the converted graph: the same error as the re-traced recipe,
        the guard fires, records (with their flags) survive deepcopy of the quantized graph."""
        model, gm, retraced = gated
        graph = to_brevitas_graph(copy.deepcopy(gm))
        graph = brevitas_quantize.preprocess_for_quantize(graph, trace_model=False)
        quantized = brevitas_quantize.quantize(graph)
        with torch.no_grad(), calibration_mode(quantized):
            for batch in batches():
                quantized(batch)
        with torch.no_grad(), bias_correction_mode(quantized):
            for batch in batches():
                quantized(batch)
        (x,) = batches(1, seed=2)  # fresh inputs from the calibration distribution
        with torch.no_grad():
            assert torch.allclose(quantized(x), retraced(x))
        copied = copy.deepcopy(quantized)
        assert copied.specializations == gm.specializations
        assert "BOOL" in specfx.explain(copied)
        with pytest.raises(GuardError):
            copied(torch.randn(1, 3, 8, 8) + 2.0)

    def test_copy_is_exact(self, seed):
        """Node names, targets, meta and outputs are those of the torch.fx graph; gm is untouched."""
        _, gm, _ = seed
        before = gm.code
        graph = to_brevitas_graph(gm)
        assert [(n.name, n.op, n.target) for n in graph.graph.nodes] == [
            (n.name, n.op, n.target) for n in gm.graph.nodes]
        assert [n.meta.get("tensor_meta") for n in graph.graph.nodes] == [
            n.meta.get("tensor_meta") for n in gm.graph.nodes]
        x = torch.randn(2, 3, 8, 8)
        assert torch.equal(graph(x), gm(x)) and gm.code == before
        assert to_brevitas_graph(graph) is graph

    def test_graph_loaded_from_disk_keeps_its_records(self, gated, tmp_path):
        """trace -> save -> load -> deepcopy -> to_brevitas_graph -> deepcopy (and the recipe's
        re-trace): the records and guards survive every step (torch.load starts gm.meta empty)."""
        model, gm, _ = gated
        torch.save(gm, tmp_path / "gated.pt")
        loaded = torch.load(tmp_path / "gated.pt", weights_only=False)
        converted = copy.deepcopy(to_brevitas_graph(copy.deepcopy(loaded)))
        assert converted.specializations == gm.specializations
        quantized = brevitas_ptq(copy.deepcopy(loaded), batches())  # (re-traced: records read from the guards)
        assert [(s.value, s.expression) for s in specfx.specializations(copy.deepcopy(quantized))] == [
            (s.value, s.expression) for s in gm.specializations]
        x = torch.randn(1, 3, 8, 8) - 2.0
        assert torch.equal(converted(x), model(x))
        with pytest.raises(GuardError):
            converted(torch.randn(1, 3, 8, 8) + 2.0)

    def test_public_names(self):
        """specfx.brevitas exports exactly to_brevitas_graph."""
        import specfx.brevitas

        assert specfx.brevitas.__all__ == ["to_brevitas_graph"]

    def test_rejects_non_graph(self):
        """Anything but a GraphModule is a TypeError naming what was passed."""
        with pytest.raises(TypeError, match="not Linear"):
            to_brevitas_graph(nn.Linear(2, 2))
