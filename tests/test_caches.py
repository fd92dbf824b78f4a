"""transformers' caches in and out of a graph: returned with eager's type, accepted as
inputs, written as eager writes them (tiny Llama and BART, default configs)."""

from __future__ import annotations

import copy
import inspect
import io
import types
import warnings

import pytest
import torch

import specfx
from specfx import Policy

transformers = pytest.importorskip("transformers")
POLICY = Policy(iter=True, bool=True)
# the keyword a cache is passed in by: transformers 5.24 renamed past_key_values to cache
# (the old name warns); outputs answer to both names
CACHE_ARG = "cache" if "cache" in inspect.signature(transformers.LlamaModel.forward).parameters else "past_key_values"


def batch(rows, length, padding, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (rows, length), generator=generator)
    mask = torch.ones(rows, length, dtype=torch.long)
    for row, pad in enumerate(padding):
        if pad:
            mask[row, length - pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


CALIBRATION = batch(2, 8, (0, 3))
BATCHES = [CALIBRATION, batch(3, 5, (2, 0, 1), seed=1), batch(1, 6, (0,), seed=2)]


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=37)).eval()


@pytest.fixture(scope="module")
def bart():
    torch.manual_seed(0)
    return transformers.BartModel(transformers.BartConfig(
        vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37)).eval()


def layer_tensors(cache):
    if hasattr(cache, "self_attention_cache"):
        return layer_tensors(cache.self_attention_cache) + layer_tensors(cache.cross_attention_cache)
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def assert_same_cache(actual, expected):
    assert type(actual) is type(expected)
    mine, eager = layer_tensors(actual), layer_tensors(expected)
    assert len(mine) == len(eager) > 0
    for a, b in zip(mine, eager):
        torch.testing.assert_close(a, b)


def one_token_step(calibration, seed=3):
    ids = torch.randint(3, 99, (calibration["input_ids"].shape[0], 1), generator=torch.Generator().manual_seed(seed))
    mask = torch.cat([calibration["attention_mask"], torch.ones(ids.shape[0], 1, dtype=torch.long)], 1)
    return {"input_ids": ids, "attention_mask": mask}


class TestCachesOut:
    def test_llama_prefill_returns_a_dynamic_cache(self, llama):
        gm = specfx.trace(llama, example_kwargs=CALIBRATION, policy=POLICY)
        for inputs in BATCHES:
            out, expected = gm(**inputs), llama(**inputs)
            torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
            assert_same_cache(out.past_key_values, expected.past_key_values)
        assert "specfx_rebuild_object" in gm.code

    def test_bart_prefill_returns_an_encoder_decoder_cache(self, bart):
        gm = specfx.trace(bart, example_kwargs=CALIBRATION, policy=POLICY)
        for inputs in BATCHES:
            out, expected = gm(**inputs), bart(**inputs)
            torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
            assert_same_cache(out.past_key_values, expected.past_key_values)
            assert out.past_key_values.is_updated == expected.past_key_values.is_updated

    def test_each_call_returns_its_own_cache(self, llama):
        """The cache is rebuilt on every call: two calls never share (or overwrite) one."""
        gm = specfx.trace(llama, example_kwargs=CALIBRATION, policy=POLICY)
        first, second = gm(**BATCHES[1]).past_key_values, gm(**BATCHES[2]).past_key_values
        assert first is not second and first.layers[0].keys.shape[0] == 3

    def test_survives_deepcopy_and_saving(self, llama):
        gm = specfx.trace(llama, example_kwargs=CALIBRATION, policy=POLICY)
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        for copied in (copy.deepcopy(gm), torch.load(buffer, weights_only=False)):
            inputs = BATCHES[1]
            assert_same_cache(copied(**inputs).past_key_values, llama(**inputs).past_key_values)


class TestCachesIn:
    def test_llama_decode_step_equals_eager_and_writes_the_cache(self, llama):
        """One new token with the prefill's cache: the graph equals eager, appends to the cache it
        is given as eager does, and returns that same cache."""
        with torch.no_grad():
            cache = llama(**CALIBRATION).past_key_values
        step = one_token_step(CALIBRATION)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", specfx.SpecializationWarning)  # the step's length 1
            gm = specfx.trace(llama, example_kwargs={**step, CACHE_ARG: copy.deepcopy(cache)}, policy=POLICY)
        assert cache.get_seq_length() == 8  # the example was copied: the trace wrote nothing of the user's
        mine, eager = copy.deepcopy(cache), copy.deepcopy(cache)
        out = gm(**step, **{CACHE_ARG: mine})
        expected = llama(**step, **{CACHE_ARG: eager})
        torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
        assert out.past_key_values is mine and mine.get_seq_length() == 9
        assert_same_cache(mine, eager)

    def test_decode_step_on_another_padded_batch(self, llama):
        with torch.no_grad():
            cache = llama(**CALIBRATION).past_key_values
        step = one_token_step(CALIBRATION)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", specfx.SpecializationWarning)
            gm = specfx.trace(llama, example_kwargs={**step, CACHE_ARG: copy.deepcopy(cache)}, policy=POLICY)
        other = BATCHES[1]
        with torch.no_grad():
            other_cache = llama(**other).past_key_values
        other_step = one_token_step(other, seed=4)
        mine, eager = copy.deepcopy(other_cache), copy.deepcopy(other_cache)
        torch.testing.assert_close(gm(**other_step, **{CACHE_ARG: mine}).last_hidden_state,
                                   llama(**other_step, **{CACHE_ARG: eager}).last_hidden_state)
        assert_same_cache(mine, eager)

    def test_static_cache_is_filled_in_place(self, llama):
        def fresh():
            return transformers.StaticCache(config=llama.config, max_cache_len=16)

        gm = specfx.trace(llama, example_kwargs={**CALIBRATION, CACHE_ARG: fresh()}, policy=POLICY)
        mine, eager = fresh(), fresh()
        out = gm(**CALIBRATION, **{CACHE_ARG: mine})
        expected = llama(**CALIBRATION, **{CACHE_ARG: eager})
        torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)
        assert out.past_key_values is mine
        assert_same_cache(mine, eager)


class _EmptyCacheModel(torch.nn.Module):
    """Returns a cache holding none of the traced tensors (nothing for the graph to rebuild it
    around) when use_cache is on; use_cache reaches forward as each subclass says."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(use_cache=True)  # (transformers 5's base config keeps no use_cache)

    def outputs(self, x, use_cache):
        return {"out": x * 2, "past_key_values": transformers.DynamicCache() if use_cache else None}


class UseCacheParameter(_EmptyCacheModel):
    def forward(self, x, use_cache=None):
        return self.outputs(x, self.config.use_cache if use_cache is None else use_cache)


class UseCacheInKwargs(_EmptyCacheModel):
    def forward(self, x, **kwargs):
        return self.outputs(x, kwargs.get("use_cache", self.config.use_cache))


class UseCacheFromConfig(_EmptyCacheModel):
    def forward(self, x):
        return self.outputs(x, self.config.use_cache)


class TestAdviceThatWorks:
    """A cache the graph cannot return: the fix names the way use_cache reaches this model,
    and following it traces a graph equal to eager."""

    @pytest.mark.parametrize("model_class, fix", [
        (UseCacheParameter, "trace with concrete_args={'use_cache': False}"),
        (UseCacheInKwargs, "trace with example_kwargs={'use_cache': False}"),
        (UseCacheFromConfig, "set model.config.use_cache = False before tracing"),
    ])
    def test_the_fix_names_how_use_cache_arrives(self, model_class, fix):
        x = torch.randn(2, 3)
        with pytest.raises(specfx.SpecializationError) as refused:
            specfx.trace(model_class(), x)
        assert f"Fix: {fix}" in str(refused.value)
        model = model_class()
        if model_class is UseCacheParameter:
            gm = specfx.trace(model, x, concrete_args={"use_cache": False})  # the graph's default
            called, eager = {}, {"use_cache": False}
        elif model_class is UseCacheInKwargs:
            gm = specfx.trace(model, (x,), {"use_cache": False})
            called = eager = {"use_cache": False}
        else:
            model.config.use_cache = False
            gm = specfx.trace(model, x)
            called = eager = {}
        other = torch.randn(5, 3)
        got, expected = gm(other, **called), model(other, **eager)
        assert got["past_key_values"] is expected["past_key_values"] is None
        torch.testing.assert_close(got["out"], expected["out"])

    def test_on_the_command_line_the_kwarg_is_an_option(self):
        from specfx._policy.spelling import spelled
        from specfx.cli.trace_command import CommandLineSpelling

        with spelled(CommandLineSpelling(None)), pytest.raises(specfx.SpecializationError,
                                                                match=r"Fix: trace with --kwarg use_cache=False"):
            specfx.trace(UseCacheInKwargs(), torch.randn(2, 3))
