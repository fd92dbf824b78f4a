"""llm-compressor's sequential pipeline on specfx graphs (``specfx.integrations.llmcompressor``).

The oneshot tests run llm-compressor itself (GPTQ W8A8 through ``oneshot(..., pipeline=
"sequential")``) on tiny models written from real architectures; they run where
llmcompressor 0.14.0.1 is installed (``.ci/run`` builds that environment: its transformers
pin differs from the main suite's). The rest runs everywhere.
"""

from __future__ import annotations

import importlib.util
import re
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


def _mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                            num_local_experts=4, num_experts_per_tok=2))


def _qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM(Qwen3MoeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                              moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                                              num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1))


def _dataset(lengths):
    generator = torch.Generator().manual_seed(1)
    rows = [{"input_ids": torch.randint(0, VOCAB, (n,), generator=generator).tolist(), "attention_mask": [1] * n}
            for n in lengths]
    import datasets

    return datasets.Dataset.from_list(rows)


# How llm-compressor collates the calibration set: one sample a batch (its default), or
# batches of 2 padded to their longest sample. Both give 4 batches of different lengths; the
# padded ones also differ in size ((2, 10), (2, 8), (2, 6), (1, 4)) and carry padding masks.
COLLATIONS = {
    "single": dict(dataset_lengths=(5, 7, 9, 6), batch_size=1),
    "padded": dict(dataset_lengths=(5, 7, 9, 6, 8, 4, 10), batch_size=2, data_collator="padding",
                   shuffle_calibration_samples=False),
}


class _RecordingCollator:
    """llm-compressor's padding collator, keeping every batch it makes (to run eager on them)."""

    def __init__(self) -> None:
        from transformers import DataCollatorWithPadding

        self.collate, self.batches = DataCollatorWithPadding(_tokenizer()), []

    def __call__(self, rows):
        batch = self.collate(rows)
        self.batches.append(dict(batch))
        return batch


def _gptq_w8a8(ignore=("lm_head", "re:.*mlp.gate$")):  # (not the head, not the MoE routers)
    from llmcompressor.modifiers.quantization import GPTQModifier

    return GPTQModifier(scheme="W8A8", targets="Linear", ignore=list(ignore))


def _oneshot(model, route, collation, **overrides):
    """GPTQ W8A8 through llm-compressor's sequential pipeline, traced by specfx ("specfx") or
    by llm-compressor's own tracer ("llmcompressor")."""
    from llmcompressor import oneshot

    settings = dict(COLLATIONS[collation])
    lengths = settings.pop("dataset_lengths")
    run = dict(model=model, dataset=_dataset(lengths), processor=_tokenizer(), recipe=_gptq_w8a8(), pipeline="sequential",
               num_calibration_samples=len(lengths), **settings)
    run.update(overrides)
    if route == "specfx":
        with specfx_llmc.use():
            oneshot(**run)
    else:
        oneshot(**run)


def _quantized(build, route, collation):
    torch.manual_seed(0)
    model = _saved(build())
    _oneshot(model, route, collation)
    probe = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        return model(input_ids=probe).logits


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
@pytest.mark.parametrize("collation", list(COLLATIONS))
@pytest.mark.parametrize("build", [_llama, _qwen3], ids=["llama", "qwen3"])
def test_oneshot_gptq_equals_llmcompressors_own_route(build, collation):
    """GPTQ W8A8 through specfx's graph quantizes bit for bit as llm-compressor's own tracer
    does on these models (where its tracer is right), on 4 batches of different lengths: one
    sample a batch, or padded batches of different sizes."""
    assert torch.equal(_quantized(build, "specfx", collation), _quantized(build, "llmcompressor", collation))


def _decoder_layer_masks(model, run):
    """(hidden-states shape, attention mask) of every decoder layer call while ``run()`` runs."""
    calls = []

    def record(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.device.type == "meta":
            return  # (llm-compressor's own tracer runs the layers on meta tensors: not a calibration)
        calls.append((tuple(hidden.shape), kwargs.get("attention_mask")))

    handles = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in model.model.layers]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return calls


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
@pytest.mark.parametrize("build", [_mixtral, _qwen3_moe], ids=["mixtral", "qwen3_moe"])
def test_moe_decoder_layers_calibrate_with_the_masks_eager_uses(build):
    """Mixtral and Qwen3-MoE choose their mask builder through a local variable: through
    specfx's graph every decoder layer calibrates with the causal-and-padding mask eager builds
    for that batch; llm-compressor's own tracer hands them None (no causal, no padding mask)."""
    from llmcompressor.utils.helpers import calibration_forward_context

    def calibrated_and_eager(route):
        torch.manual_seed(0)
        model = _saved(build())
        collator = _RecordingCollator()
        calibrated = _decoder_layer_masks(model, lambda: _oneshot(model, route, "padded", data_collator=collator))
        eager = {}
        with calibration_forward_context(model):  # (as calibration runs: eager attention, no cache)
            for batch in collator.batches:  # (masks depend on the batch and the config only, not on the weights)
                eager.update(_decoder_layer_masks(model, lambda batch=batch: model(**batch)))
        return calibrated, eager

    def same(mask, expected):
        return mask is expected is None or (isinstance(mask, torch.Tensor) and isinstance(expected, torch.Tensor)
                                            and torch.equal(mask, expected))

    calibrated, eager = calibrated_and_eager("specfx")
    assert len(eager) == 4 and all(isinstance(mask, torch.Tensor) for mask in eager.values())
    assert {shape for shape, _ in calibrated} == set(eager)
    assert all(same(mask, eager[shape]) for shape, mask in calibrated)
    calibrated, eager = calibrated_and_eager("llmcompressor")
    wrong = [shape for shape, mask in calibrated if not same(mask, eager[shape])]
    assert len(wrong) >= 2 * 4 and all(mask is None for shape, mask in calibrated if shape in wrong)


def _whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        suppress_tokens=None, begin_suppress_tokens=None))


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
def test_whispers_encoder_is_calibrated():
    """Whisper's encoder runs inside the graph's subgraphs: every encoder Linear sees the 4
    calibration batches and GPTQ quantizes it (llm-compressor's own graph leaves the encoder
    inside a wrapped call, and GPTQ stops with "No statistics available" for its Linears)."""
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    model = _saved(_whisper())
    generator = torch.Generator().manual_seed(1)
    rows = [{"input_features": torch.randn(8, 32, generator=generator),
             "decoder_input_ids": torch.randint(0, VOCAB, (n,), generator=generator)} for n in (5, 7, 9, 6)]
    loader = DataLoader(rows, batch_size=1, collate_fn=lambda batch: {key: torch.stack([row[key] for row in batch])
                                                                     for key in batch[0]})
    encoder_linears = {name: module for name, module in model.model.encoder.named_modules()
                       if isinstance(module, torch.nn.Linear)}
    seen = {name: 0 for name in encoder_linears}

    def count(name):
        def hook(module, args):
            if args[0].device.type != "meta":
                seen[name] += 1
        return hook

    handles = [module.register_forward_pre_hook(count(name)) for name, module in encoder_linears.items()]
    try:
        _oneshot(model, "specfx", "single", dataset=loader, num_calibration_samples=None,
                 recipe=_gptq_w8a8(ignore=["proj_out"]))
    finally:
        for handle in handles:
            handle.remove()
    assert len(encoder_linears) == 12 and all(count >= 4 for count in seen.values()), seen
    assert all(hasattr(module, "weight_scale") for module in encoder_linears.values())


# -- multimodal models, as llm-compressor calls them: images and text in one batch ----------------
IMAGE = VOCAB - 1  # the image placeholder token
START, END = VOCAB - 2, VOCAB - 3  # the image's begin and end tokens (Qwen2-VL, Gemma3)


def _llava():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=16, patch_size=8, projection_dim=32)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text, image_token_id=IMAGE,
                                                     vision_feature_layer=-2, vision_feature_select_strategy="default"))


def _qwen2_vl():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration(Qwen2VLConfig(
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, patch_size=4, spatial_merge_size=2,
                           temporal_patch_size=2, in_channels=3),
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0}),
        image_token_id=IMAGE, video_token_id=VOCAB - 4, vision_start_token_id=START, vision_end_token_id=END))


def _gemma3():
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    return Gemma3ForConditionalGeneration(Gemma3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=16, patch_size=4),
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                         sliding_window=8),
        mm_tokens_per_image=4, image_token_index=IMAGE, boi_token_index=START, eoi_token_index=END))


# per model: the image's tokens in the text, and the rest of a row's inputs for one image
IMAGE_TOKENS = {"llava": [IMAGE] * 4, "qwen2_vl": [START, IMAGE, END], "gemma3": [START] + [IMAGE] * 4 + [END]}


def _image_inputs(name, rows, generator):
    if name == "qwen2_vl":  # one 8x8 image: 2x2 patches of 4 pixels (2 frames), merged into 1 token
        return {"pixel_values": torch.randn(4 * rows, 3 * 2 * 4 * 4, generator=generator),
                "image_grid_thw": torch.tensor([[1, 2, 2]] * rows)}
    return {"pixel_values": torch.randn(rows, 3, 16, 16, generator=generator)}


def _multimodal_batch(name, lengths, generator):
    """One image and ``n`` text tokens a row (the image after the first token), padded on the
    left to the longest row, with what the model's processor adds (token types)."""
    image = torch.tensor(IMAGE_TOKENS[name])
    rows = [torch.cat([torch.randint(1, VOCAB - 5, (1,), generator=generator), image,
                       torch.randint(1, VOCAB - 5, (n - 1,), generator=generator)]) for n in lengths]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row):], mask[index, width - len(row):] = row, 1
    batch = {"input_ids": ids, "attention_mask": mask, **_image_inputs(name, len(rows), generator)}
    if name == "gemma3":
        batch["token_type_ids"] = (ids == IMAGE).long()
    if name == "qwen2_vl":
        batch["mm_token_type_ids"] = (ids == IMAGE).long()
    return batch


MULTIMODAL = {"llava": _llava, "qwen2_vl": _qwen2_vl, "gemma3": _gemma3}


def _text_model_output(model, run):
    """What the language model's final norm returns while ``run()`` runs (the logits are meta
    tensors in llm-compressor's calibration context)."""
    seen = []
    handle = model.model.language_model.norm.register_forward_hook(lambda module, args, output: seen.append(output))
    try:
        run()
    finally:
        handle.remove()
    (output,) = seen
    return output


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
@pytest.mark.parametrize("name", list(MULTIMODAL))
def test_multimodal_graph_runs_other_batches_as_eager(name):
    """Traced on a batch of 2 rows with an image each, as llm-compressor traces it (its
    sequential targets: the vision and decoder layers), the graph equals eager on batches of
    other lengths and padding, and of other sizes and image counts where the model's code
    does not decide on them in Python: LLaVA makes a Python list of the images
    (``list(image_features)``); Qwen2-VL walks each row's token types in Python to number the
    M-RoPE positions, and takes ``len()`` of its image grid; there the graph raises GuardError
    naming that line."""
    from llmcompressor.utils.helpers import calibration_forward_context
    from llmcompressor.utils.pytorch.module import infer_sequential_targets

    torch.manual_seed(0)
    model = MULTIMODAL[name]().eval()
    generator = torch.Generator().manual_seed(0)
    graph, _ = specfx_llmc.traced_model(model, _multimodal_batch(name, [5, 3], generator),
                                        infer_sequential_targets(model, None))
    same_layout = _multimodal_batch(name, [5, 3], generator)  # (other tokens, pixels)
    others = {"lengths": [6, 2], "sizes": [4, 6, 2], "one": [7]}
    decided = {"llava": {"sizes": "len(image_features)", "one": "len(image_features)"},
               "qwen2_vl": {"lengths": "input_token_type", "sizes": "len(grid_thw)", "one": "len(grid_thw)"},
               "gemma3": {}}[name]
    with calibration_forward_context(model):
        for label, batch in [("same", same_layout)] + [(label, _multimodal_batch(name, lengths, generator))
                                                       for label, lengths in others.items()]:
            expected = _text_model_output(model, lambda batch=batch: model(**batch))
            if label in decided:
                with pytest.raises(specfx.GuardError, match=re.escape(decided[label])):
                    graph(**batch)
                continue
            assert torch.equal(_text_model_output(model, lambda batch=batch: graph(**batch)), expected), label


def _module_state(model):
    """Everything of every module tracing could change, by identity: its tables (of whatever
    mapping type offloading put there), hook tables, attributes and flags."""
    state = {}
    for name, module in model.named_modules():
        attributes = vars(module)
        state[name] = (
            type(module._parameters), [(key, id(value)) for key, value in module._parameters.items()],
            type(module._buffers), [(key, id(value)) for key, value in module._buffers.items()],
            [(key, id(value)) for key, value in module._modules.items()],
            {key: [(k, id(v)) for k, v in value.items()] for key, value in attributes.items()
             if "_hooks" in key and isinstance(value, dict)},
            {key: id(value) for key, value in attributes.items()
             if key not in ("_parameters", "_buffers", "_modules") and not ("_hooks" in key and isinstance(value, dict))},
            module.training)
    return state


@needs_llmcompressor
@pytest.mark.filterwarnings("ignore")  # (llm-compressor's and transformers' own deprecations)
@pytest.mark.parametrize("name", ["llava", "gemma3"])
def test_multimodal_oneshot_leaves_the_model_as_it_found_it(name, monkeypatch):
    """oneshot GPTQ W8A8 through the integration on 4 single-image samples of different
    lengths: inside oneshot (its offloading has replaced every parameter table by a mapping
    that is not a dict) the trace leaves every module's tables, hooks, attributes and flags as
    they were, and the vision tower still records the hidden states eager records (LLaVA
    calibrates on the second-to-last one)."""
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    model = _saved(MULTIMODAL[name]())
    generator = torch.Generator().manual_seed(0)
    rows = [{key: value[0] for key, value in _multimodal_batch(name, [n], generator).items()} for n in (5, 3, 6, 4)]
    loader = DataLoader(rows, batch_size=1, collate_fn=lambda batch: {key: torch.stack([row[key] for row in batch])
                                                                     for key in batch[0]})
    vision = model.model.vision_tower

    def recorded_hidden_states():
        with torch.no_grad():
            return len(vision(rows[0]["pixel_values"][None], output_hidden_states=True).hidden_states)

    expected_states = recorded_hidden_states()
    seen = []
    trace_subgraphs = specfx_llmc.trace_subgraphs

    def observed(traced, *args, **kwargs):
        before = _module_state(traced)
        subgraphs = trace_subgraphs(traced, *args, **kwargs)
        seen.append((before, _module_state(traced), recorded_hidden_states()))
        return subgraphs

    monkeypatch.setattr(specfx_llmc, "trace_subgraphs", observed)
    _oneshot(model, "specfx", "single", dataset=loader, num_calibration_samples=None,
             recipe=_gptq_w8a8(ignore=["lm_head", "re:.*vision_tower.*", "re:.*multi_modal_projector.*"]))
    ((before, after, states),) = seen
    assert all(not issubclass(tables[0], dict) for tables in before.values())  # (the real offloading context)
    assert after == before, [name for name in before if before[name] != after[name]]
    assert states == expected_states
    assert all(hasattr(layer.mlp.down_proj, "weight_scale") for layer in model.model.language_model.layers)


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
