"""FX graph-mode quantization of models torch.fx.symbolic_trace cannot trace, via specfx
(the flow of docs/quantization.md), plus torch.compile, ShapeProp and save/load."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.fx.custom_config import ConvertCustomConfig, PrepareCustomConfig
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
from torch.fx.passes.shape_prop import ShapeProp

import specfx
from specfx import GuardError, Policy

# torch 2.13 deprecates torch.ao FX quantization (moving to torchao) and warns on every call.
pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning"),
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
]

# Quantized vs float, on inputs from the calibration distribution: max abs error below this
# fraction of the largest float output, and signal-to-quantization-noise ratio above SQNR_DB.
RELATIVE_TOLERANCE = 0.05
SQNR_DB = 25.0
RECORDS = ["specializations", "specfx_policy"]


class GroupedConvNet(nn.Module):
    """Conv stem, a branch on the image size, per-group convs over torch.split chunks, linear head."""

    def __init__(self, channels=8, groups=2, classes=10):
        super().__init__()
        self.width = channels // groups
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.branches = nn.ModuleList(nn.Conv2d(self.width, self.width, 3, padding=1) for _ in range(groups))
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.relu(self.stem(x))
        if x.shape[-1] > 16:
            x = self.pool(x)
        parts = torch.split(x, self.width, dim=1)
        x = torch.cat([branch(p) for branch, p in zip(self.branches, parts)], dim=1)
        x = torch.flatten(F.adaptive_avg_pool2d(self.relu(x), 1), 1)
        return self.head(x)


class SplitCatConv(nn.Module):
    """The README's split/cat module between two convolutions."""

    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, 4, 3, padding=1)
        self.conv_out = nn.Conv2d(4, 4, 1)

    def call_cat(self, *args):
        return torch.cat(args, dim=1)

    def forward(self, x):
        x = torch.split(self.conv_in(x), 2, dim=1)
        return self.conv_out(self.call_cat(*x))


def _quantize(gm, example, preserve=True):
    prepare_config = PrepareCustomConfig().set_preserved_attributes(RECORDS) if preserve else None
    convert_config = ConvertCustomConfig().set_preserved_attributes(RECORDS) if preserve else None
    with torch.no_grad():
        prepared = prepare_fx(copy.deepcopy(gm), get_default_qconfig_mapping("x86"),
                              example_inputs=(example,), prepare_custom_config=prepare_config)
        generator = torch.Generator().manual_seed(1)
        for _ in range(8):
            prepared(torch.randn((8,) + tuple(example.shape[1:]), generator=generator))
        return convert_fx(prepared, convert_custom_config=convert_config)


def _guard_nodes(gm):
    return [n for n in gm.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "").startswith("guard_")]


@pytest.fixture(scope="module")
def flow():
    """The float model, its specfx graph and the quantized graph (built once)."""
    torch.manual_seed(0)
    model = GroupedConvNet().eval()
    example = torch.randn(4, 3, 32, 32)
    gm = specfx.trace(model, example, policy=Policy(iter=True, bool=True))
    return model, example, gm, _quantize(gm, example)


def _assert_close_quantized(reference, output):
    error = (output - reference).abs().max()
    sqnr = 20 * torch.log10(reference.norm() / (output - reference).norm())
    assert error < RELATIVE_TOLERANCE * reference.abs().max(), f"max abs error {error}"
    assert sqnr > SQNR_DB, f"SQNR {sqnr} dB"


class TestQuantization:
    def test_specfx_graph_matches_float_model(self, flow):
        """The specfx graph needs ITER_LEN and BOOL, and is exact on other batch and image sizes."""
        model, example, gm, _ = flow
        assert sorted(s.kind for s in gm.specializations) == ["bool", "iter"]
        for x in (example, torch.randn(2, 3, 40, 24)):
            assert torch.equal(gm(x), model(x))

    def test_quantized_model_is_close_to_float(self, flow):
        """After prepare_fx, calibration and convert_fx the model runs quantized ops within the stated
        tolerance of the float model."""
        model, _, _, quantized = flow
        assert any(n.target is torch.quantize_per_tensor for n in quantized.graph.nodes)
        assert any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in quantized.modules())
        for x in (torch.randn(16, 3, 32, 32), torch.randn(3, 3, 40, 24)):
            with torch.no_grad():
                _assert_close_quantized(model(x), quantized(x))

    def test_quantized_model_keeps_and_fires_guards(self, flow):
        """Both guards survive prepare_fx/convert_fx, and the quantized model refuses an input that takes
        the float model's other branch."""
        model, _, gm, quantized = flow
        assert len(_guard_nodes(quantized)) == len(_guard_nodes(gm)) == 2
        small = torch.randn(2, 3, 12, 12)
        assert model(small).shape == (2, 10)
        with pytest.raises(GuardError, match=r"x.shape\[-1\] > 16"):
            quantized(small)

    def test_preserved_attributes_keep_the_records(self, flow):
        """With set_preserved_attributes the quantized model keeps gm.specializations for explain()."""
        _, _, gm, quantized = flow
        assert quantized.specializations == gm.specializations
        assert "2 specializations" in specfx.explain(quantized)

    def test_records_are_dropped_without_preserved_attributes(self, flow):
        """Without preserved attributes prepare_fx/convert_fx keep the guards but drop gm.specializations."""
        _, example, gm, _ = flow
        quantized = _quantize(gm, example, preserve=False)
        assert len(_guard_nodes(quantized)) == 2
        assert not hasattr(quantized, "specializations")

    def test_prepare_fx_leaves_the_traced_graph_usable(self, flow):
        """Quantizing a copy leaves the specfx graph unchanged (the code and records of a fresh
        trace, no observers, eager's float outputs) and picklable (the loaded graph computes the same)."""
        model, example, gm, _ = flow
        fresh = specfx.trace(model, example, policy=Policy(iter=True, bool=True))
        assert gm.code == fresh.code and gm.specializations == fresh.specializations
        assert not any(hasattr(m, "qconfig") or "activation_post_process" in name for name, m in gm.named_modules())
        x = torch.randn(2, 3, 40, 24)
        with torch.no_grad():
            torch.testing.assert_close(gm(x), model(x))
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        assert loaded.code == gm.code and loaded.specializations == gm.specializations
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), gm(x))

    def test_readme_split_cat_quantizes(self):
        """The README's split/cat module between convs traces with ITER_LEN and quantizes, guard kept."""
        torch.manual_seed(0)
        model = SplitCatConv().eval()
        example = torch.randn(4, 3, 16, 16)
        with pytest.raises(torch.fx.proxy.TraceError):
            torch.fx.symbolic_trace(model)
        gm = specfx.trace(model, example, policy=Policy(iter=True))
        quantized = _quantize(gm, example)
        with torch.no_grad():
            x = torch.randn(8, 3, 12, 20)
            _assert_close_quantized(model(x), quantized(x))
        (guard,) = _guard_nodes(quantized)
        assert guard.args[1] == 2  # len(split) == 2, checked at every call


class TestEcosystem:
    def test_torch_compile_eager_backend(self, flow):
        """torch.compile(backend='eager') runs the specfx graph like eager, with its guards compiled in."""
        model, example, gm, _ = flow
        compiled = torch.compile(gm, backend="eager")
        with torch.no_grad():
            assert torch.allclose(compiled(example), model(example))
            with pytest.raises(GuardError):
                compiled(torch.randn(2, 3, 12, 12))

    def test_tensor_meta_from_trace_and_shape_prop(self, flow):
        """Nodes carry TensorMetadata from the example run; ShapeProp recomputes it for another input."""
        _, _, gm, _ = flow
        gm = copy.deepcopy(gm)
        meta = {n.name: n.meta["tensor_meta"] for n in gm.graph.nodes if "tensor_meta" in n.meta}
        assert meta["x"].shape == (4, 3, 32, 32) and meta["x"].dtype == torch.float32
        assert [m.shape for m in meta["split"]] == [(4, 4, 16, 16)] * 2
        ShapeProp(gm).propagate(torch.randn(2, 3, 64, 48))
        shapes = {n.name: tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes if n.op == "call_module"}
        assert shapes["stem"] == (2, 8, 64, 48) and shapes["pool"] == (2, 8, 32, 24)
        assert shapes["head"] == (2, 10)

    def test_save_load_round_trip(self, flow):
        """torch.save/torch.load keeps the graph's results, guards and specialization records."""
        _, example, gm, _ = flow
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        assert torch.equal(loaded(example), gm(example))
        assert loaded.specializations == gm.specializations
        with pytest.raises(GuardError):
            loaded(torch.randn(2, 3, 12, 12))

    @pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")
    def test_quantized_state_dict_round_trip(self, flow):
        """A quantized state_dict loads into a model quantized the same way, with identical results."""
        _, example, gm, quantized = flow
        buffer = io.BytesIO()
        torch.save(quantized.state_dict(), buffer)
        buffer.seek(0)
        restored = _quantize(gm, example)
        restored.load_state_dict(torch.load(buffer))
        x = torch.randn(5, 3, 32, 32)
        with torch.no_grad():
            assert torch.equal(restored(x), quantized(x))
