"""llm-compressor's sequential pipeline on specfx graphs (``specfx.integrations.llmcompressor``).

The oneshot tests run llm-compressor itself (GPTQ W8A8 through ``oneshot(..., pipeline=
"sequential")``) on tiny models written from real architectures; they run where
llmcompressor 0.14.0.1 is installed (``.ci/run`` builds that environment: its transformers
pin differs from the main suite's). The rest runs everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile

import pytest
import torch

import specfx
import specfx.integrations.llmcompressor as specfx_llmc

VOCAB = 128


class TestWithoutLlmcompressor:
    def test_use_says_how_to_install(self, monkeypatch):
        """Without llm-compressor, use() fails at once with the install command."""
        monkeypatch.setitem(sys.modules, "llmcompressor", None)
        with pytest.raises(ImportError, match=r"pip install llmcompressor==0\.14\.0\.1"):
            with specfx_llmc.use():
                pass

    def test_an_untested_version_is_refused(self, monkeypatch):
        """Another llm-compressor release is refused naming the tested one (its private helpers may differ)."""
        import types

        monkeypatch.setitem(sys.modules, "llmcompressor", types.SimpleNamespace(__version__="0.99"))
        with pytest.raises(ImportError, match=r"tested with llmcompressor 0\.14\.0\.1, found 0\.99"):
            specfx_llmc.trace_subgraphs(torch.nn.Linear(2, 2), {}, [], [])


# llm-compressor pins its own transformers: .ci/run runs these in an environment of their own
needs_llmcompressor = pytest.mark.skipif(importlib.util.find_spec("llmcompressor") is None,
                                         reason="llm-compressor runs in its own environment in .ci/run")


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0")


def _saved(model):
    """The model as users load it (oneshot reads its config from the checkpoint's path)."""
    path = tempfile.mkdtemp()
    model.save_pretrained(path)
    _tokenizer().save_pretrained(path)
    return type(model).from_pretrained(path).eval()


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def _qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                        max_position_embeddings=64))


def _dataset(lengths=(5, 7, 9, 6)):
    generator = torch.Generator().manual_seed(1)
    rows = [{"input_ids": torch.randint(0, VOCAB, (n,), generator=generator).tolist(), "attention_mask": [1] * n}
            for n in lengths]
    import datasets

    return datasets.Dataset.from_list(rows)


def _quantized(build, route):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier

    torch.manual_seed(0)
    model = _saved(build())
    recipe = GPTQModifier(scheme="W8A8", targets="Linear", ignore=["lm_head"])
    run = dict(model=model, dataset=_dataset(), processor=_tokenizer(), recipe=recipe, pipeline="sequential",
               num_calibration_samples=4)
    if route == "specfx":
        with specfx_llmc.use():
            oneshot(**run)
    else:
        oneshot(**run)
    probe = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return model(input_ids=probe).logits


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
@pytest.mark.parametrize("build", [_llama, _qwen3], ids=["llama", "qwen3"])
def test_oneshot_gptq_equals_llmcompressors_own_route(build):
    """GPTQ W8A8 through specfx's graph quantizes bit for bit as llm-compressor's own tracer
    does on these models (where its tracer is right), on batches of four lengths."""
    assert torch.equal(_quantized(build, "specfx"), _quantized(build, "llmcompressor"))


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
def test_use_puts_the_pipeline_back():
    """use() swaps the pipeline's tracer for its block only."""
    from llmcompressor.pipelines.sequential import pipeline

    before = pipeline.trace_subgraphs
    with specfx_llmc.use():
        assert pipeline.trace_subgraphs is specfx_llmc.trace_subgraphs
    assert pipeline.trace_subgraphs is before


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
def test_subgraphs_run_as_the_model_and_leave_it_untouched():
    """The subgraphs, run in order as the pipeline runs them, give the model's output; tracing
    changes nothing in the model (its tables, hooks, config and training flags)."""
    from llmcompressor.utils.helpers import calibration_forward_context

    torch.manual_seed(0)
    model = _llama().eval()
    batch = {"input_ids": torch.randint(0, VOCAB, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    batch["attention_mask"][1, :2] = 0
    before = {name: (id(m), dict(m._parameters), dict(m._buffers), dict(m._modules), m.training,
                     dict(m._forward_hooks), dict(m._forward_pre_hooks)) for name, m in model.named_modules()}
    config = model.config.to_dict()
    subgraphs = specfx_llmc.trace_subgraphs(model, batch, ["LlamaDecoderLayer"], [])
    after = {name: (id(m), dict(m._parameters), dict(m._buffers), dict(m._modules), m.training,
                    dict(m._forward_hooks), dict(m._forward_pre_hooks)) for name, m in model.named_modules()}
    assert after == before and model.config.to_dict() == config
    assert len(subgraphs) == 3  # one before the first layer, one per layer
    seen = []
    hook = model.model.norm.register_forward_hook(lambda module, args, output: seen.append(output))
    try:
        with calibration_forward_context(model):
            model(**batch)
            values = dict(batch)
            for subgraph in subgraphs:
                values.update(subgraph.forward(model, **{k: v for k, v in values.items() if k in subgraph.input_names}))
    finally:
        hook.remove()
    eager, graph = seen  # the last hidden states, as the eager model and as the subgraphs compute them
    assert torch.equal(eager, graph)


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
def test_a_batch_that_breaks_a_guard_raises_during_calibration():
    """A batch that would take another path than the first raises GuardError in the subgraph
    that decided it, instead of calibrating a graph of the wrong path."""
    torch.manual_seed(0)
    model = _llama().eval()
    first = {"input_ids": torch.randint(0, VOCAB, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    subgraphs = specfx_llmc.trace_subgraphs(model, first, ["LlamaDecoderLayer"], [])
    guarded = [s for s in subgraphs if "specfx_guard" in s.graph.python_code("self").src]
    assert guarded, "the trace guards what it took from the first batch"
    with pytest.raises(specfx.GuardError):
        subgraphs[0].forward(model, input_ids=torch.randint(0, VOCAB, (2, 7)), attention_mask=None)
