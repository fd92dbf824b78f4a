"""Real models from the zoo (``tools/zoo/run.py``), a fast representative subset: each is
traced, compared with eager on fresh inputs, and shown to guard the decisions it baked in.

The full zoo (every transformers model, timm when importable) is ``python -m tools.zoo.run``.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, Policy, Specialize, SpecializationError

from tools.zoo import meta_llm
from tools.zoo import run as zoo


def _transformers():
    return pytest.importorskip("transformers")


def _transformers_4() -> bool:
    return _transformers().__version__.startswith("4.")


def _close(expected, actual, atol=1e-5):
    want, got = zoo.tensors_of(expected), zoo.tensors_of(actual)
    assert len(want) == len(got) and want
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, atol=atol, rtol=1e-5)


def _check_fresh(built, gm, atol=1e-5):
    """Every fresh input runs through the graph and matches eager (same RNG seed for dropout)."""
    for call in [built.example] + built.fresh:
        expected, actual = zoo.run_pair(built, gm, call)
        _close(expected, actual, atol)


def _guard_fires(built, gm):
    (args, kwargs), _ = built.guard_input
    with pytest.raises(GuardError):
        with torch.set_grad_enabled(built.grad):
            gm(*args, **kwargs)


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run a snippet in a fresh interpreter: some specfx failures are segmentation faults."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


# -- hand-written timm blocks -------------------------------------------------------------


class TestTimmBlocks:
    @pytest.mark.parametrize("name", ["resnet-stage", "resnet-stage[train]", "convnext-block",
                                      "convnext-block[conv_mlp,train]"])
    def test_convnets_trace_without_flags(self, name):
        """ResNet/ConvNeXt blocks (eval and train: BatchNorm, DropPath) trace with Policy(), bake in
        nothing and match eager at other batch and image sizes."""
        built = zoo.CASES_BY_NAME[name].build()
        gm = zoo.trace_built(built, Policy())
        assert [s for s in gm.specializations if s.kind not in ("dtype", "device")] == []
        _check_fresh(built, gm)

    def test_tracing_leaves_batchnorm_statistics_alone(self):
        """Tracing a train-mode ResNet stage does not update its BatchNorm running statistics."""
        built = zoo.CASES_BY_NAME["resnet-stage[train]"].build()
        before = {k: v.clone() for k, v in built.model.state_dict().items()}
        zoo.trace_built(built, Policy())
        after = built.model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)

    @pytest.mark.parametrize("name", ["vit-block", "vit-block[train]"])
    def test_vit_block(self, name):
        """A ViT block matches eager for any batch and token count; `attn_mask is None` is guarded."""
        built = zoo.CASES_BY_NAME[name].build()
        gm = zoo.trace_built(built, Policy())
        _check_fresh(built, gm)
        _guard_fires(built, gm)
        args, kwargs = built.guard_input[0]
        assert built.model(*args, **kwargs).shape == args[0].shape  # eager takes the masked path

    def test_swin_block_traces_for_every_resolution(self):
        """specfx traces the Swin block with Policy(): one graph for padded, odd and square resolutions."""
        built = zoo.CASES_BY_NAME["swin-block"].build()
        gm = zoo.trace_built(built, Policy())
        assert {s.kind for s in gm.specializations} <= {"unpack", "dtype", "device"}
        _check_fresh(built, gm)
        _guard_fires(built, gm)  # a 3-D input: `B, H, W, C = x.shape` was unpacked into four names

    def test_swin_block_static_mask(self):
        """The Swin block with timm's precomputed mask traces like plain FX and matches eager."""
        built = zoo.CASES_BY_NAME["swin-block[static-mask]"].build()
        gm = zoo.trace_built(built, Policy())
        _check_fresh(built, gm)
        symbolic = torch.fx.symbolic_trace(built.model)
        x = built.example[0][0]
        torch.testing.assert_close(gm(x), symbolic(x))


# -- torch.nn built-ins -------------------------------------------------------------------


class TestTorchNN:
    def test_multihead_attention_needs_bool(self):
        """nn.MultiheadAttention as the root needs BOOL (its input checks branch on tensor properties)."""
        built = zoo.CASES_BY_NAME["nn-mha"].build()
        with pytest.raises(SpecializationError, match="Specialize.BOOL"):
            zoo.trace_built(built, Policy())
        with pytest.raises(torch.fx.proxy.TraceError):
            torch.fx.symbolic_trace(built.model)

    def test_multihead_attention(self):
        """nn.MultiheadAttention with a key padding mask matches eager for other batch/sequence sizes, and
        an unbatched query fails a guard."""
        built = zoo.CASES_BY_NAME["nn-mha"].build()
        gm = zoo.trace_built(built, Policy(bool=True))
        _check_fresh(built, gm)
        _guard_fires(built, gm)
        args, kwargs = built.guard_input[0]
        assert built.model(*args, **kwargs)[0].shape == (5, 16)  # eager handles the unbatched path

    @pytest.mark.parametrize("name", ["nn-encoder-layer", "nn-encoder-layer[train]",
                                      "nn-encoder-layer[non-leaf mha]"])
    def test_transformer_encoder_layer(self, name):
        """nn.TransformerEncoderLayer (eval, train with dropout, MHA traced through) matches eager, and an
        unbatched input fails a guard."""
        built = zoo.CASES_BY_NAME[name].build()
        gm = zoo.trace_built(built, Policy(bool=True))
        _check_fresh(built, gm)
        _guard_fires(built, gm)
        targets = {n.target for n in gm.graph.nodes if n.op == "call_module"}
        assert ("self_attn" in targets) is not name.endswith("[non-leaf mha]")

    def test_transformer_encoder_with_padding_mask(self):
        """nn.TransformerEncoder with src_key_padding_mask needs ITER_LEN and BOOL and matches eager."""
        built = zoo.CASES_BY_NAME["nn-encoder"].build()
        with pytest.raises(SpecializationError):
            zoo.trace_built(built, Policy(bool=True))
        gm = zoo.trace_built(built, Policy(iter=True, bool=True))
        _check_fresh(built, gm)
        _guard_fires(built, gm)

    # eager's fast path warns once per process
    @pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
    def test_transformer_encoder_no_grad_differs_only_at_padding(self):
        """Under no_grad eager takes the nested-tensor fast path (zeros at padded tokens); the graph,
        traced on the slow path, agrees at every real token."""
        built = zoo.CASES_BY_NAME["nn-encoder[no_grad]"].build()
        gm = zoo.trace_built(built, Policy(iter=True, bool=True))
        (x,), kwargs = built.fresh[0]
        padded = kwargs["src_key_padding_mask"]
        with torch.no_grad():
            expected = built.model(x, **kwargs)
        with torch.no_grad():
            actual = gm(x, **kwargs)
        torch.testing.assert_close(actual[~padded], expected[~padded], atol=1e-5, rtol=1e-5)
        assert torch.all(expected[padded] == 0) and not torch.all(actual[padded] == 0)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_rnn_as_leaf(self, kind):
        """nn.LSTM / nn.GRU inside a model stay call_module leaves and need no flags."""
        built = zoo.CASES_BY_NAME[f"nn-{kind}"].build()
        gm = zoo.trace_built(built, Policy())
        assert "rnn" in {n.target for n in gm.graph.nodes if n.op == "call_module"}
        _check_fresh(built, gm)

    @pytest.mark.parametrize("kind", ["lstm", "gru"])
    def test_rnn_traced_through(self, kind):
        """nn.LSTM / nn.GRU traced through need BOOL in the rnn scope only; unbatched input fails a guard."""
        built = zoo.CASES_BY_NAME[f"nn-{kind}[non-leaf]"].build()
        gm = zoo.trace_built(built)
        assert "rnn" not in {n.target for n in gm.graph.nodes if n.op == "call_module"}
        assert {s.module for s in gm.specializations if s.flag == specfx.Specialize.BOOL} == {"rnn"}
        _check_fresh(built, gm)
        _guard_fires(built, gm)
        with pytest.raises(SpecializationError):  # without the scope, BOOL is refused
            zoo.trace_built(built, Policy())


# -- transformers -------------------------------------------------------------------------

# The CI subset: one architecture per way transformers code defeats a plain trace (the comment on each
# says which) and every family (the rest: python -m tools.zoo.run).
# Flags a user ends with by following specfx's messages from Policy() on transformers 4.57.
CI_ARCHITECTURES = {
    "distilbert": "",               # no flags at all
    "bert": "bool",                 # `if attention_mask.dim() == ...`: the model branches on the mask's rank
    "deberta-v2": "bool",           # @torch.jit.script helpers, torch.tensor(x.size(-1))
    "llama": "iter,bool",           # @check_model_inputs wrapper, vmapped padded mask, use_cache
    "opt": "iter,bool",             # a wrapper whose code object is smaller than the signature
    "bart": "iter,bool",            # torch.ones(batch, length), EncoderDecoderCache
    "vit": "bool",                  # wrapped forward of a vision model
    "whisper": "bool",              # audio encoder-decoder
    "mixtral[moe-leaf]": "iter,bool",  # the routing-generic MoE graph
}


def _flags(policy: Policy) -> str:
    return ",".join(k for k in ("iter", "bool", "shapes", "scalars")
                    if Policy(**{k: True}).flags.value & policy.flags.value)


def _architecture(name):
    _transformers()
    return zoo.ARCHITECTURES_BY_NAME[name], zoo.CASES_BY_NAME[f"hf-{name}"].build()


@functools.lru_cache(maxsize=None)
def _followed(name):
    """(built, graph, policy, concrete_args) of an architecture, traced once per test session
    (tracing changes neither the model nor the inputs)."""
    _, built = _architecture(name)
    return (built, *zoo.follow_messages(built))


class TestTransformers:
    @pytest.mark.parametrize("name", sorted(CI_ARCHITECTURES))
    def test_one_graph_for_padded_unpadded_and_other_sizes(self, name):
        """model(**batch) is the root, the config is the default one: following specfx's messages
        gives one graph that equals eager on the right-padded calibration batch, on another batch
        size and length padded differently, and on an unpadded batch of one."""
        built, gm, policy, concrete = _followed(name)
        if _transformers_4():
            assert _flags(policy) == CI_ARCHITECTURES[name]
        assert set(concrete) <= {"use_cache"}
        for _, batch in [built.example] + built.fresh:
            expected = built.model(**batch, **concrete)
            _close(expected, gm(**batch))

    def test_the_default_config_returns_eager_s_cache(self):
        """BART and Llama with use_cache on (the config's default) trace with no concrete_args and
        return eager's cache type, with eager's keys and values."""
        for name in ("bart", "llama"):
            built, gm, _, concrete = _followed(name)
            assert concrete == {}
            batch = built.fresh[0][1]
            out, expected = gm(**batch), built.model(**batch)
            assert type(out.past_key_values) is type(expected.past_key_values)
            _close(expected.past_key_values, out.past_key_values)

    def test_use_cache_concrete_arg_is_the_graph_default(self):
        """With concrete_args={'use_cache': False} the graph is called as the model is, gm(**batch)."""
        built, _, _, _ = _followed("llama")
        gm = specfx.trace(built.model, example_kwargs=built.example[1], policy=Policy(iter=True, bool=True),
                          concrete_args={"use_cache": False})
        batch = built.fresh[0][1]
        out = gm(**batch)
        assert "past_key_values" not in out and list(out) == list(built.model(**batch, use_cache=False))
        assert "past_key_values" in built.model(**batch)  # what the default config returns

    def test_moe_routing_guarded_on_the_calibration_batch(self):
        """Mixtral traced as is bakes the routing of the calibration batch in: the graph matches eager on
        it and every other batch either matches or fails a guard (never silently differs)."""
        built, gm, policy, concrete = _followed("mixtral")
        if _transformers_4():  # `self.experts[expert_idx]` with a traced index (5.x: grouped matmuls)
            assert Specialize.SCALARS in policy.flags
        _close(built.model(**built.example[1], **concrete), gm(**built.example[1]))
        for _, batch in built.fresh:
            try:
                actual = gm(**batch)
            except GuardError as error:
                assert "guard failed" in str(error)
                continue
            _close(built.model(**batch, **concrete), actual)

    def test_moe_sparse_block_as_a_leaf_is_routing_generic(self):
        """With the sparse MoE block a leaf, no routing decision is baked in: a call_module per block,
        no SCALARS, and every batch matches eager."""
        built, gm, policy, concrete = _followed("mixtral[moe-leaf]")
        assert Specialize.SCALARS not in policy.flags
        (sparse,) = built.leaf_modules
        blocks = [n for n in gm.graph.nodes
                  if n.op == "call_module" and isinstance(gm.get_submodule(n.target), sparse)]
        assert len(blocks) == 2
        for _, batch in [built.example] + built.fresh:
            _close(built.model(**batch, **concrete), gm(**batch))

    def test_moe_index_error_points_at_the_model_line(self):
        """Indexing the experts ModuleList with a traced int is reported at the model's line."""
        _, built = _architecture("mixtral")
        if not _transformers_4():
            pytest.skip("transformers 5 runs the experts with grouped matmuls: no ModuleList indexing")
        with pytest.raises(SpecializationError) as info:
            specfx.trace(built.model, example_kwargs=built.example[1], policy=Policy(iter=True, bool=True),
                         concrete_args={"use_cache": False})
        assert "container.py" not in str(info.value)
        assert "self.experts[expert_idx]" in str(info.value)


# -- meta device --------------------------------------------------------------------------


class TestMetaDevice:
    def test_two_layer_llama_on_meta(self):
        """A 2-layer, 4096-hidden Llama built on meta traces from meta ids without allocating weights, and the
        graph runs for other batch sizes and lengths."""
        _transformers()
        model = meta_llm.build_meta_llama(layers=2)
        assert all(p.device.type == "meta" for p in model.parameters())
        assert sum(p.numel() for p in model.parameters()) > 6e8
        gm = meta_llm.trace_meta(model, batch=2, length=16)
        out = gm(torch.zeros(3, 7, dtype=torch.long, device="meta"))
        assert out.shape == (3, 7, 32000) and out.device.type == "meta"
        assert {s.flag for s in gm.specializations} <= {specfx.Specialize.NONE, specfx.Specialize.BOOL,
                                                         specfx.Specialize.ITER_LEN}

    def test_data_dependent_decision_on_meta_says_why(self):
        """A branch on tensor data of a meta input raises SpecializationError naming the meta device."""
        def f(x):
            return x * 2 if x.sum() > 0 else x

        with pytest.raises(SpecializationError, match="meta device"):
            specfx.trace(f, torch.empty(4, device="meta"), policy=Policy(bool=True))


# -- regressions: specfx bugs met in the zoo (run in a subprocess: they used to crash) --------


class TestZooRegressions:
    def test_gelu_new_does_not_crash(self):
        """GPT-2's NewGELUActivation formula (torch.pow(x, 3.0)) traces without crashing the interpreter."""
        done = _run_isolated("""
            import math, torch, specfx
            def gelu_new(x):
                inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
                return 0.5 * x * (1.0 + torch.tanh(inner))
            gm = specfx.trace(gelu_new, torch.randn(2, 3))
            x = torch.randn(4, 5)
            assert torch.allclose(gm(x), gelu_new(x))
        """)
        assert done.returncode == 0, done.stderr[-500:]

    def test_leaf_returning_none_takes_the_eager_path(self):
        """A leaf module that returns None (a mask builder with no mask) is None in the traced code too."""
        class NoMask(nn.Module):
            def forward(self, x):
                return None

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.mask = NoMask()

            def forward(self, x):
                mask = self.mask(x)
                return x * 2 if mask is None else x

        model = Model()
        gm = specfx.trace(model, torch.ones(2), leaf_modules=[NoMask])
        assert torch.equal(gm(torch.ones(2)), model(torch.ones(2)))

    def test_concrete_args_with_non_default_value(self):
        """concrete_args={'use_cache': False} (as transformers users trace) bakes in a non-default value."""
        def f(x, use_cache=None):
            return x if use_cache else -x

        gm = specfx.trace(f, (torch.ones(2),), concrete_args={"use_cache": False})
        assert torch.equal(gm(torch.ones(2), False), -torch.ones(2))
        # a GuardError, not a plain assertion, so that a Specializer retraces for the other value
        with pytest.raises(specfx.GuardError, match="traced with use_cache=False baked in"):
            gm(torch.ones(2), True)
