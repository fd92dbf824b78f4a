"""Re-tracing a specfx graph with any tracer (torch.fx.symbolic_trace, FX quantization,
unpickling, specfx.trace) reproduces the same graph without asking for values:
buffers sliced by traced sizes, methods of buffers and factories given traced sizes
record themselves as nodes."""

import copy
import io
import os
import warnings

import pytest
import torch

import specfx
from specfx import Policy


class BufferAndFactories(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(32.0).reshape(1, 32))

    def forward(self, x):
        n = x.shape[1]
        sliced = self.table[:, :n]  # a buffer indexed by a traced size
        narrowed = self.table.narrow(1, 0, n)  # a buffer's method given one (torch dispatches it)
        zeros = torch.zeros(x.shape[0], n)  # a factory given traced sizes
        full = torch.full((x.shape[0], n), 0.5, device=x.device)
        chained = self.table.float().expand(x.shape[0], -1)  # a value computed from a buffer alone
        return x + sliced + narrowed + zeros + full + x[:, :n] + chained[:, :n]


def node_names_and_targets(gm):
    """The graph's calls in order, and the attributes it reads (torch.fx's tracer reads a
    buffer once per use, specfx's once)."""
    calls = [(n.op, n.name, str(n.target)) for n in gm.graph.nodes
             if n.op != "get_attr" and "flatten_inputs" not in str(n.target)]
    return calls, {n.target for n in gm.graph.nodes if n.op == "get_attr"}


@pytest.fixture(scope="module")
def traced():
    model = BufferAndFactories()
    return model, specfx.trace(model, (torch.rand(2, 5),))


def test_only_calls_a_stock_tracer_cannot_trace_are_rewritten(traced):
    _, gm = traced
    code = gm.code
    assert "specfx_getitem(table, (slice(None, None, None), slice(None, getitem, None)))" in code
    assert "specfx_call_function('zeros', getitem_2, getitem)" in code  # sizes one by one
    # torch hands a proxy passed as an argument (or in a list of sizes) to __torch_function__
    assert "narrow = table.narrow(1, 0, getitem)" in code
    # (the device only flows into the factory: read when the graph runs)
    assert "full = torch.full((getitem_3, getitem), 0.5, device = getattr_4)" in code
    assert "specfx_call_method(float_1, 'expand', getitem_4, -1)" in code
    assert "x[(slice(None, None, None), slice(None, getitem, None))]" in code  # a traced tensor: left as it is
    assert "float_1 = table.float()" in code  # no traced value among its arguments: left as it is


@pytest.mark.parametrize("retrace", [torch.fx.symbolic_trace, specfx.trace,
                                     lambda gm: torch.load(_saved(gm), weights_only=False)],
                         ids=["symbolic_trace", "specfx.trace", "torch.load"])
def test_any_tracer_reproduces_the_graph(traced, retrace):
    model, gm = traced
    again = retrace(gm)
    # (symbolic_trace does not know the structured entry, and runs what depends on buffers
    # alone once, as torch.fx does with buffers: table.float(); the rest is node for node)
    calls, attributes = node_names_and_targets(gm)
    if retrace is torch.fx.symbolic_trace:
        calls = [call for call in calls if call[1] != "float_1"]
    assert node_names_and_targets(again) == (calls, attributes)
    for shape in [(2, 5), (3, 7)]:
        x = torch.rand(*shape)
        assert torch.equal(again(x), model(x))


def _saved(gm):
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    return buffer


def test_the_functions_run_the_op_on_values():
    table = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(specfx.getitem(table, (slice(None), slice(None, 2))), table[:, :2])
    assert torch.equal(specfx.call_method(table, "narrow", 1, 1, 2), table.narrow(1, 1, 2))
    assert torch.equal(specfx.call_function("full", (2, 2), 3.0), torch.full((2, 2), 3.0))


os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _encoders():
    transformers = pytest.importorskip("transformers")
    yield "distilbert", transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64))
    yield "bert", transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64))


@pytest.mark.parametrize("name", ["distilbert", "bert"])
def test_transformers_encoders_retrace_with_torch_fx_and_quantize_with_torch_ao(name):
    """position_ids/token_type_ids[:, :seq_len] made torch.fx.symbolic_trace(gm) and
    prepare_fx ask for an int; both now re-trace the graph, and the results equal eager."""
    from torch.ao.quantization import QConfigMapping, get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    torch.manual_seed(0)
    model = dict(_encoders())[name].eval()
    ids, mask = torch.randint(0, 100, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    mask[0, 5:] = 0
    gm = specfx.trace(model, (), {"input_ids": ids, "attention_mask": mask}, policy=Policy(bool=True))
    assert "specfx_getitem(embeddings_position_ids" in gm.code
    other = {"input_ids": torch.randint(0, 100, (3, 6)), "attention_mask": torch.ones(3, 6, dtype=torch.long)}
    expected = model(**other).last_hidden_state

    again = torch.fx.symbolic_trace(gm)
    assert torch.equal(again(**other).last_hidden_state, expected)
    assert again.code.count("specfx_guard_") == gm.code.count("specfx_guard_")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's FX graph mode and observers warn on every call
        unquantized = convert_fx(prepare_fx(copy.deepcopy(gm), QConfigMapping(), example_inputs=(ids, mask)))
        assert torch.equal(unquantized(**other).last_hidden_state, expected)
        prepared = prepare_fx(copy.deepcopy(gm), get_default_qconfig_mapping(), example_inputs=(ids, mask))
        assert torch.equal(prepared(**other).last_hidden_state, expected)  # observers do not change values
        quantized = convert_fx(prepared)
    assert torch.allclose(quantized(**other).last_hidden_state, expected, atol=0.5)
    assert "specfx_guard_" in quantized.code


FACTORY_CALLS = {
    "tensor": lambda: torch.tensor([1.0, 2.0]), "zeros": lambda: torch.zeros(2), "ones": lambda: torch.ones(2),
    "arange": lambda: torch.arange(2.0), "full": lambda: torch.full((2,), 3.0), "eye": lambda: torch.eye(2)[0],
    "linspace": lambda: torch.linspace(0, 1, 2), "scalar_tensor": lambda: torch.scalar_tensor(2.0),
    "rand": lambda: torch.rand(2), "randn": lambda: torch.randn(2),
}


@pytest.mark.parametrize("name", sorted(FACTORY_CALLS))
def test_tensors_made_in_forward_stay_made_by_the_graph(name):
    """specfx.trace(gm) and torch.load keep a factory call as a call (a fresh tensor per
    call), not a constant baked in by the re-trace."""
    make = FACTORY_CALLS[name]

    def f(x):
        return x + make()

    gm = specfx.trace(f, (torch.ones(2),))
    assert f"torch.{name}(" in gm.code
    for again in (specfx.trace(gm), torch.load(_saved(gm), weights_only=False)):
        assert again.code == gm.code and "_tensor_constant" not in again.code


class TestPythonDrawsUnderAnotherTracer:
    """A graph that draws from Python's `random` at every call cannot be re-traced by a tracer
    that would freeze the draw into a constant: it refuses there, and specfx's re-trace keeps it."""

    @staticmethod
    def noisy(x):
        import random

        return x * random.uniform(0.5, 1.5)

    def test_stock_symbolic_trace_refuses(self):
        gm = specfx.trace(self.noisy, torch.ones(2))
        with pytest.raises(torch.fx.proxy.TraceError, match=r"draws random\.uniform\(\) .* one constant .* specfx\.trace\(gm\)"):
            torch.fx.symbolic_trace(gm)

    def test_specfx_retrace_keeps_the_draw(self):
        import random

        again = specfx.trace(specfx.trace(self.noisy, torch.ones(2)))
        random.seed(3)
        first = again(torch.ones(2))
        random.seed(3)
        assert torch.equal(first, self.noisy(torch.ones(2)))
        assert not torch.equal(again(torch.ones(2)), first)  # a fresh draw on the next call
