"""Brevitas' documented graph PTQ recipe on specfx graphs of real architectures (tiny replicas
in tests/brevitas_models.py, random init), against Brevitas' own ``value_trace`` route on the
same model and data. Brevitas runs for real: no mocks."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, SpecializationError
from tests import brevitas_models

pytestmark = [
    pytest.mark.filterwarnings("ignore:brevitas.fx is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*value_trace.*:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:fast_hadamard_transform package not found:UserWarning"),
    pytest.mark.filterwarnings("ignore:`treespec.children_specs` is deprecated:FutureWarning"),
    # Brevitas' older copy of torch.fx lints a graph attribute that holds an output's pytree
    # spec (torch.fx's own tracer makes the same attribute read, `_tree_spec_constant`)
    pytest.mark.filterwarnings("ignore:Node _out_spec target _out_spec:UserWarning"),
]

brevitas_quantize = pytest.importorskip("brevitas.graph.quantize")
from brevitas.fx import symbolic_trace as brevitas_symbolic_trace  # noqa: E402
from brevitas.fx import value_trace  # noqa: E402

from specfx.brevitas import to_brevitas_graph  # noqa: E402
from tests.test_brevitas import brevitas_ptq as recipe  # noqa: E402  (Brevitas' documented recipe)


def images(count: int, seed: int, batch: int = 4) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 3, 16, 16, generator=generator) for _ in range(count)]


def logits(output):
    return output if isinstance(output, torch.Tensor) else output[0]


def sqnr(reference: torch.Tensor, output: torch.Tensor) -> float:
    return float(20 * torch.log10(reference.norm() / (output - reference).norm()))


def value_trace_route(model, example, data):
    """Brevitas' own route: value_trace, then the recipe without its re-trace."""
    (parameter, *_) = inspect.signature(model.forward).parameters
    graph = value_trace(copy.deepcopy(model), value_args={parameter: example})
    return recipe(graph, data, trace_model=False)


def guard_names(graph) -> list:
    return [node.target.__name__ for node in graph.graph.nodes
            if node.op == "call_function" and node.target.__name__.startswith("guard_")]


@pytest.mark.parametrize("family", ["resnet", "densenet", "mobilenet_v3", "vit"])
def test_vision_family_matches_value_trace(family):
    """The specfx graph through the unchanged recipe (Brevitas re-traces it) quantizes as
    closely as value_trace's graph; ResNet's also through to_brevitas_graph (trace_model=False)."""
    model = brevitas_models.VISION[family]().eval()
    data, (fresh,) = images(1, seed=1), images(1, seed=2)
    gm = specfx.trace(model, data[0])
    routes = {"retraced": recipe(copy.deepcopy(gm), data), "value_trace": value_trace_route(model, data[0], data)}
    if family == "resnet":
        routes["converted"] = recipe(to_brevitas_graph(copy.deepcopy(gm)), data, trace_model=False)
    with torch.no_grad():
        reference = model(fresh)
        measured = {route: sqnr(reference, quantized(fresh)) for route, quantized in routes.items()}
    assert measured["value_trace"] > 10, measured  # (ViT, calibrated on one batch: 13.8 dB)
    for route in routes:
        assert abs(measured[route] - measured["value_trace"]) < 1.0, measured
    if family == "resnet":
        # `b, c, h, w = x.shape` leaves a length guard that Brevitas' re-trace records again (its
        # tracer hands the guard a lazily built attribute proxy of `x.shape`); the quantized graph
        # refuses an unbatched image, on which eager's unpacking fails
        quantized = routes["retraced"]
        assert "guard_len" in guard_names(quantized)
        unbatched = torch.randn(3, 16, 16)
        with pytest.raises(ValueError, match="not enough values to unpack"):
            model(unbatched)
        with pytest.raises(GuardError, match=r"len\(x.shape\) == 4.*len\(x.shape\) == 3"):
            quantized(unbatched)


class ShapeUnpack(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        b, c, h, w = x.shape
        return self.conv(x).reshape(b, 4 * h * w)


@pytest.mark.parametrize("tracer", ["brevitas", "torch.fx"])
def test_shape_length_guard_retraces_under_any_tracer(tracer):
    """Under Brevitas' symbolic tracer and torch.fx's, the length guard on `x.shape` becomes
    a node again (it was evaluated on Brevitas' attribute proxy and failed with "'len' is not
    supported in symbolic tracing"); the new graph computes eager's result and fires."""
    model = ShapeUnpack().eval()
    gm = specfx.trace(model, torch.randn(2, 3, 8, 8))
    retrace = brevitas_symbolic_trace if tracer == "brevitas" else torch.fx.symbolic_trace
    graph = retrace(copy.deepcopy(gm))
    assert guard_names(graph) == ["guard_len"]
    x = torch.randn(3, 3, 5, 5)
    assert torch.equal(graph(x), model(x))
    with pytest.raises(GuardError, match=r"len\(x.shape\) == 4"):
        graph(torch.randn(3, 5, 5))


class Attention(nn.Module):
    """Attention whose module output is unpacked: `out, weights = attention(x, x, x)`."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)  # as in a transformer block (Brevitas' attention takes no QuantTensor)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.norm(self.proj(x))
        out, weights = self.attention(x, x, x)
        return self.head(out) + torch.mean(weights)  # (a QuantTensor has no .mean())


def test_unpacked_module_output_is_quantized_as_a_tuple():
    """Brevitas' quantize takes a module's output for a tuple only when every node using it is
    an element read: the length guard of the unpacking counts as one (it was quantized as a
    tensor: "'tuple' object has no attribute 'reshape'")."""
    model = Attention().eval()
    generator = torch.Generator().manual_seed(1)
    data = [torch.randn(4, 6, 8, generator=generator) for _ in range(2)]
    fresh = torch.randn(4, 6, 8, generator=generator)
    gm = specfx.trace(model, data[0])
    retraced = recipe(copy.deepcopy(gm), data)
    converted = recipe(to_brevitas_graph(copy.deepcopy(gm)), data, trace_model=False)
    reference_route = value_trace_route(model, data[0], data)
    with torch.no_grad():
        reference = model(fresh)
        expected = sqnr(reference, reference_route(fresh))
        assert abs(sqnr(reference, retraced(fresh)) - expected) < 1.0
        assert abs(sqnr(reference, converted(fresh)) - expected) < 1.0
    assert "guard_len" in guard_names(retraced) and "guard_len" in guard_names(converted)


class Classifier(nn.Module):
    """A convnet that returns a transformers ModelOutput, as transformers models do."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, pixel_values):
        from transformers.modeling_outputs import ImageClassifierOutput

        features = torch.relu(self.conv(pixel_values)).mean((2, 3))
        return ImageClassifierOutput(logits=self.fc(features))


def test_model_output_return_goes_through_the_recipe():
    """A graph returning a ModelOutput (rebuilt from its pytree spec, a constant Brevitas'
    tracer refuses) re-traces under Brevitas: the quantized graph returns the same type."""
    from transformers.modeling_outputs import ImageClassifierOutput

    model = Classifier().eval()
    data, (fresh,) = images(2, seed=1), images(1, seed=2)
    gm = specfx.trace(model, data[0])
    quantized = recipe(copy.deepcopy(gm), data)
    with torch.no_grad():
        output = quantized(fresh)
        assert type(output) is ImageClassifierOutput
        assert sqnr(model(fresh).logits, output.logits) > 20


def test_structured_inputs_retrace_under_brevitas():
    """A graph taking a dict re-traces under Brevitas' tracer; its entry check still refuses
    a dict with another key."""

    def f(batch):
        return torch.relu(batch["x"]) * batch["scale"]

    example = {"x": torch.randn(3), "scale": torch.tensor(2.0)}
    gm = specfx.trace(f, (example,))
    graph = brevitas_symbolic_trace(copy.deepcopy(gm))
    assert torch.equal(graph(example), f(example))
    with pytest.raises(GuardError, match="batch"):
        graph({"x": torch.randn(3), "bias": torch.tensor(2.0)})


FAKE_TRACER_TESTS = '''
import pytest
import torch
from brevitas.fx import brevitas_symbolic_trace, value_trace


class Unpack(torch.nn.Module):
    def forward(self, x):
        b, c = x.size()
        return x.view(b * c)


@pytest.mark.parametrize("pretrained", [True, False])
def test_value_tracer(pretrained):
    graph = value_trace(Unpack(), value_args={"x": torch.randn(2, 3)})
    assert graph.specializations  # a specfx graph
    assert torch.equal(graph(torch.ones(2, 3)), torch.ones(6))


def test_symbolic_tracer():
    graph = brevitas_symbolic_trace(Unpack())
    assert type(graph).__module__.startswith("torch.fx")
    assert torch.equal(graph(torch.ones(2, 3)), torch.ones(6))


def test_failing():
    raise AssertionError("this one fails")
'''


def test_brevitas_tracer_tests_tool(tmp_path):
    """tools.peers.brevitas_tracer_tests runs a copy's test_tracer.py with specfx for Brevitas'
    tracers, leaves out the pretrained=True tests, counts, and writes nothing into the copy."""
    import subprocess
    import sys

    folder = tmp_path / "tests" / "brevitas" / "fx"
    folder.mkdir(parents=True)
    (folder / "test_tracer.py").write_text(FAKE_TRACER_TESTS)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    run = subprocess.run([sys.executable, "-m", "tools.peers.brevitas_tracer_tests", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "specfx for value_trace and brevitas_symbolic_trace: 2/3 passed, 1 failed" in run.stdout
    assert "test_failing: failed AssertionError: this one fails" in run.stdout
    assert "test_value_tracer[True]" not in run.stdout
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


class QuantLayers(nn.Module):
    """A QAT model built of Brevitas' quant layers (their quantizers are injector classes)."""

    def __init__(self):
        super().__init__()
        from brevitas.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU

        self.inp = QuantIdentity(return_quant_tensor=True)
        self.conv = QuantConv2d(3, 4, 3, padding=1, return_quant_tensor=True)
        self.relu = QuantReLU(return_quant_tensor=True)
        self.fc = QuantLinear(4 * 8 * 8, 5, bias=True)

    def forward(self, x):
        return self.fc(self.relu(self.conv(self.inp(x))).flatten(1))


# per-tensor scales are (1, 1, 1, 1) by design: the size-1 shape guards on them are meant
QAT_WARNING = pytest.mark.filterwarnings(r"ignore:\d+ specialization.s. were decided on an empty container")


def qat_pair():
    """(eager model, its specfx graph), both in train mode, from the same state: past the
    collection of runtime statistics (as after calibration), whose call counter a graph cannot
    carry (test_brevitas_runtime_statistics_in_train_mode_are_refused)."""
    model = QuantLayers().train()
    for module in model.modules():
        if hasattr(module, "collect_stats_steps") and hasattr(module, "counter"):
            module.counter = module.collect_stats_steps + 1
    eager = copy.deepcopy(model)
    # (Brevitas' percentile statistics read x.numel() as an int: SHAPES; a QuantTensor's signed
    # flag is a tensor that Brevitas' layers branch on: BOOL)
    gm = specfx.trace(copy.deepcopy(model), torch.randn(2, 3, 8, 8), policy=specfx.Policy(shapes=True, bool=True))
    return eager, gm


@QAT_WARNING
def test_brevitas_quant_layers_trace_in_eval_mode():
    """Brevitas' quant layers trace (their injectors answer an unknown attribute with
    DependencyError, which crashed the trace), and the eval-mode graph computes eager's outputs."""
    model = QuantLayers().eval()
    gm = specfx.trace(copy.deepcopy(model), torch.randn(2, 3, 8, 8), policy=specfx.Policy(shapes=True, bool=True))
    for step in range(2):
        x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        assert torch.equal(gm(x), model(x))
    with pytest.raises(GuardError, match=r"tensor.shape == \(2, 3, 8, 8\)"):
        gm(torch.randn(1, 3, 8, 8))


@QAT_WARNING
def test_brevitas_runtime_statistics_in_train_mode_are_refused():
    """In train mode Brevitas' runtime-statistics scaling counts its calls in a Python int
    (`self.counter = new_counter`) and switches from collecting statistics to its learned scale
    after `collect_stats_steps` calls: a graph would collect statistics forever, so the trace is
    refused, naming the counters and Brevitas' line, and the model is left as it was."""
    model = QuantLayers().train()
    counters = {name: m.counter for name, m in model.named_modules() if hasattr(m, "counter")}
    with pytest.raises(SpecializationError, match=r"(?s)forward changes the model's state \(inp\.act_quant\..*"
                                                  r"scaling_impl\.counter \(bound to an int\).*brevitas/core/scaling/"):
        specfx.trace(model, torch.randn(2, 3, 8, 8), policy=specfx.Policy(shapes=True, bool=True))
    assert {name: m.counter for name, m in model.named_modules() if hasattr(m, "counter")} == counters


def assert_same_gradients(eager, traced):
    """Every parameter's gradient is finite and equal in both; the weights' are non-zero."""
    pairs = list(zip(eager.named_parameters(), traced.named_parameters()))
    assert pairs
    for (name, parameter), (traced_name, traced_parameter) in pairs:
        assert name == traced_name
        assert (parameter.grad is None) == (traced_parameter.grad is None), name
        if parameter.grad is not None:
            assert torch.isfinite(traced_parameter.grad).all(), name
            torch.testing.assert_close(traced_parameter.grad, parameter.grad, rtol=0, atol=0, msg=name)
            if name.endswith("weight"):
                assert traced_parameter.grad.abs().sum() > 0, name


def sgd_step(model, x):
    """One optimizer step on a squared-output loss; returns the loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    return loss.detach()


@QAT_WARNING
def test_brevitas_quant_layers_gradients_equal_eager():
    """The straight-through estimators (autograd Functions Brevitas holds as bound methods made
    at import, `round_ste_impl = RoundSteFn.apply`) are graph calls of the Function: the graph's
    gradients are eager's (they were torch.round's zero gradient), and after an optimizer step on
    each the next outputs agree."""
    eager, gm = qat_pair()
    generator = torch.Generator().manual_seed(3)
    x, after = (torch.randn(2, 3, 8, 8, generator=generator) for _ in range(2))
    assert torch.equal(sgd_step(gm, x), sgd_step(eager, x))
    assert_same_gradients(eager, gm)
    assert "RoundSteFn" in gm.code
    assert torch.equal(gm(after), eager(after))


class ResidualNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        b, c, h, w = x.shape
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.relu(self.conv2(y) + y)
        return self.fc(y.mean((2, 3)).reshape(b, -1))


@QAT_WARNING
def test_ptq_graph_trains_as_value_traces():
    """QAT after PTQ: one optimizer step on the graph Brevitas' recipe made from the specfx graph
    gives finite, non-zero gradients equal to those of the graph made from value_trace's (Brevitas'
    own route); the quantized graph, traced by specfx in train mode, gives its gradients."""
    model = ResidualNet().eval()
    data, (x,) = images(2, seed=1), images(1, seed=3)
    quantized = recipe(copy.deepcopy(specfx.trace(model, data[0])), data).train()
    reference = value_trace_route(model, data[0], data).train()
    traced = specfx.trace(copy.deepcopy(quantized), x, policy=specfx.Policy(shapes=True, bool=True))
    assert traced.training
    eager = copy.deepcopy(quantized)
    assert torch.equal(sgd_step(quantized, x), sgd_step(reference, x))
    assert_same_gradients(reference, quantized)
    assert torch.equal(sgd_step(traced, x), sgd_step(eager, x))
    assert_same_gradients(eager, traced)
    with torch.no_grad():
        assert torch.equal(quantized(x), reference(x))
        assert torch.equal(traced(x), eager(x))
    with pytest.raises(GuardError, match=r"len\(x.shape\) == 4"):
        quantized(torch.randn(3, 16, 16))


def layerwise_recipe(graph, data):
    """Brevitas' route for transformers: its layers replaced in the graph as it is (no re-trace,
    no quantizer on the graph's inputs), then calibration and bias correction."""
    from brevitas.graph.calibrate import bias_correction_mode, calibration_mode

    quantized = brevitas_quantize.layerwise_quantize(graph)
    for mode in (calibration_mode, bias_correction_mode):
        with torch.no_grad(), mode(quantized):
            for batch in data:
                quantized(**batch)
    return quantized


def transformers_batches(family: str, count: int) -> list:
    generator = torch.Generator().manual_seed(1)
    if family == "dinov2":
        return [{"pixel_values": torch.randn(4, 3, 16, 16, generator=generator)} for _ in range(count)]
    return [{"input_ids": torch.randint(0, 64, (4, 12), generator=generator),
             "attention_mask": torch.ones(4, 12, dtype=torch.long)} for _ in range(count)]


# the input left out whose None the graph assumes (a guard), given a value
UNTRACED_INPUT = {"dinov2": ("head_mask", torch.ones(2, 4)), "bert": ("token_type_ids", torch.zeros(4, 12, dtype=torch.long)),
                  "distilbert": ("head_mask", torch.ones(2, 4)), "mobilebert": ("token_type_ids", torch.zeros(4, 12, dtype=torch.long))}


@pytest.mark.parametrize("family, return_dict", [("bert", True), ("bert", False), ("distilbert", True),
                                                 ("mobilebert", False), ("dinov2", True)])
def test_transformers_family_quantizes_layerwise(family, return_dict):
    """transformers' classifiers (their own classes, tiny configs) traced by specfx, quantized by
    Brevitas' layerwise_quantize, calibrated and bias-corrected: ≥ 10 dB against the float model
    (value_trace cannot trace any of them), with the ModelOutput returned by default and the
    tuple of return_dict=False; the guards still fire in the quantized graph."""
    model = brevitas_models.transformers_model(family).eval()
    model.config.return_dict = return_dict
    (*data, fresh) = transformers_batches(family, 3)
    gm = specfx.trace(model, example_kwargs=data[0], policy=specfx.Policy(bool=True))
    quantized = layerwise_recipe(copy.deepcopy(gm), data)
    with torch.no_grad():
        expected, output = model(**fresh), quantized(**fresh)
        assert type(output) is type(expected)
        assert sqnr(logits(expected), logits(output)) >= 10
    name, value = UNTRACED_INPUT[family]
    with pytest.raises(GuardError, match=f"{name} is None"):
        quantized(**fresh, **{name: value})


def test_to_brevitas_graph_refuses_a_structured_graph_at_once_naming_the_routes():
    """Dinov2's graph (keyword inputs, a ModelOutput) is refused before any Brevitas step runs
    (Brevitas' residual handler used to spin for minutes on it), naming the routes that work."""
    model = brevitas_models.transformers_model("dinov2").eval()
    gm = specfx.trace(model, example_kwargs=transformers_batches("dinov2", 1)[0], policy=specfx.Policy(bool=True))
    with pytest.raises(TypeError, match=r"StructuredCodeGen.*preprocess_for_quantize\(gm\).*layerwise_quantize\(gm\)"):
        to_brevitas_graph(gm)
