"""FX graph-mode quantization of transformer graphs through specfx.quantize_fx (the deprecated
upstream route; PT2E through specfx.export is the maintained one): prepared without a re-trace,
sizes and integer tensors unobserved, output types, records and guards kept."""

import copy
import io
import os
import warnings

import pytest
import torch
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

import specfx
from specfx import GuardError, Policy
from specfx.quantize_fx import convert_fx, prepare_fx

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # torch.ao.quantization warns on every call
              pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
              pytest.mark.filterwarnings("ignore:torch.inf detected in input tensor:UserWarning")]  # -inf masks


def batch(size, length, pad=0):
    mask = torch.ones(size, length, dtype=torch.long)
    if pad:
        mask[0, length - pad:] = 0
    return {"input_ids": torch.randint(0, 100, (size, length)), "attention_mask": mask}


def distilbert():
    model = transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)).eval()
    return model, batch(2, 8, pad=3), Policy(bool=True)


def qwen2_moe():
    model = transformers.Qwen2MoeModel(transformers.Qwen2MoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, use_cache=False)).eval()
    return model, {"input_ids": batch(2, 8)["input_ids"]}, Policy(iter=True, bool=True, scalars=True)


def gpt_neo():
    model = transformers.GPTNeoModel(transformers.GPTNeoConfig(
        vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]],
        max_position_embeddings=64, use_cache=False)).eval()
    return model, {"input_ids": batch(2, 8)["input_ids"]}, Policy(iter=True, bool=True)


def sqnr(reference, output):
    reference, output = reference.detach(), output.detach()
    return float(10 * torch.log10(reference.pow(2).mean() / (reference - output).pow(2).mean()))


@pytest.fixture(scope="module", params=[distilbert, qwen2_moe, gpt_neo], ids=["distilbert", "qwen2-moe", "gpt-neo"])
def quantized(request):
    torch.manual_seed(0)
    model, example, policy = request.param()
    gm = specfx.trace(model, (), example, policy=policy)
    prepared = prepare_fx(gm, get_default_qconfig_mapping("x86"), tuple(example.values()))
    for _ in range(4):
        prepared(**example)
    return model, gm, convert_fx(prepared), example


class TestTransformers:
    def test_torch_prepare_fx_retraces_the_same_graph(self):
        """torch's own prepare_fx re-traces the graph (position_ids sliced by the traced
        length records itself): observers in, values unchanged, guards kept."""
        torch.manual_seed(0)
        model, example, policy = distilbert()
        gm = specfx.trace(model, (), example, policy=policy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation and observer notices
            prepared = torch_prepare_fx(copy.deepcopy(gm), get_default_qconfig_mapping("x86"), tuple(example.values()))
        assert torch.equal(prepared(**example).last_hidden_state, model(**example).last_hidden_state)
        assert prepared.code.count("specfx_guard_") == gm.code.count("specfx_guard_")

    def test_quantized_close_to_float_with_the_same_output_type(self, quantized):
        """Quantized ops run, the output is eager's ModelOutput type, and stays close to float."""
        model, _, q, example = quantized
        expected, actual = model(**example), q(**example)
        assert type(actual) is type(expected)
        assert any("quantized" in str(n.target) for n in q.graph.nodes)
        assert sqnr(expected.last_hidden_state, actual.last_hidden_state) > 8

    def test_no_observer_on_sizes_or_integers(self, quantized):
        """Only float tensors are observed: quantize ops never take torch.Size or int64 values."""
        _, gm, q, _ = quantized
        kinds = {n.name: (n.meta.get("type"), getattr(n.meta.get("tensor_meta"), "dtype", None))
                 for n in gm.graph.nodes}
        for node in q.graph.nodes:
            if node.target is torch.quantize_per_tensor:
                traced = kinds.get(node.args[0].name)
                assert traced is None or traced[1] is None or traced[1].is_floating_point

    def test_records_and_guards_kept(self, quantized):
        """The converted graph keeps gm.specializations and its guard calls."""
        _, gm, q, example = quantized
        assert q.specializations == gm.specializations
        assert q.code.count("specfx_guard_") == gm.code.count("specfx_guard_")
        buffer = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch saves quantized weights as TypedStorage
            torch.save(q, buffer)
            buffer.seek(0)
            loaded = torch.load(buffer, weights_only=False)
        assert copy.deepcopy(loaded).specializations == gm.specializations
        with pytest.raises(GuardError, match="input_ids is None, traced as a Tensor"):
            q(**{**example, "input_ids": None})

    def test_data_guard_fires_after_conversion(self):
        """DistilBERT's one graph covers unpadded batches too, also once quantized."""
        torch.manual_seed(0)
        model, example, policy = distilbert()
        gm = specfx.trace(model, (), example, policy=policy)
        prepared = prepare_fx(gm, get_default_qconfig_mapping("x86"), tuple(example.values()))
        prepared(**example)
        q = convert_fx(prepared)
        unpadded = batch(2, 8)  # no padding: transformers kept its traceable mask path while tracing
        assert q(**unpadded).last_hidden_state.shape == model(**unpadded).last_hidden_state.shape


class TestBadInput:
    def test_a_model_is_refused_with_the_fix(self):
        with pytest.raises(TypeError, match=r"specfx.trace\(model"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prepare_fx(torch.nn.Linear(2, 2), get_default_qconfig_mapping("x86"), (torch.ones(1, 2),))
