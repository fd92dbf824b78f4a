"""Calibration sets: Specializer.fit (the fewest variants, no retrace afterwards) and
trace(..., calibration=) (one graph for every batch, or a refusal naming the batch)."""

from __future__ import annotations

import os
import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import Policy, Specialize

from .models import line_of

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = os.path.relpath(__file__)


class SignAndChunks(nn.Module):
    """A branch on data and a loop over chunks: a batch's path is (its sign, its number of chunks)."""

    def forward(self, x):
        if x.sum() > 0:
            x = x * 2
        return torch.cat([part * index for index, part in enumerate(torch.split(x, 2))])


class PatchNet(nn.Module):
    """A ViT-style stem: a position table made for 32x32 images, resized for other resolutions."""

    def __init__(self, size=32, patch=8, dim=8):
        super().__init__()
        self.size, self.patch = size, patch
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, dim, size // patch, size // patch))
        self.head = nn.Linear(dim, 4)

    def forward(self, pixel_values):
        n, c, h, w = pixel_values.shape
        x = self.embed(pixel_values)
        pos = self.pos
        if h != self.size or w != self.size:
            pos = F.interpolate(pos, size=(h // self.patch, w // self.patch), mode="bilinear")
        x = (x + pos).flatten(2).transpose(1, 2)
        return self.head(x.mean(1)).view(n, -1)


def _bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=20)
    return transformers, transformers.BertModel(config).eval()


def _padded(transformers, size, length, pad, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 50, (size, length), generator=generator)
    mask = torch.ones(size, length, dtype=torch.long)
    ids[0, length - pad:], mask[0, length - pad:] = 0, 0  # the first sequence is padded
    return transformers.BatchEncoding({"input_ids": ids, "attention_mask": mask})


class TestFit:
    @settings(max_examples=20, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from([4, 6, 8]), st.sampled_from([-1, 1])), min_size=1, max_size=10),
           st.randoms(use_true_random=False))
    def test_fewest_variants_whatever_the_order(self, spec_list, shuffle):
        """As many variants as distinct paths, in any order; afterwards no batch retraces and
        each runs equal to eager on the variant that says it serves it."""
        batches = [torch.arange(1.0, n + 1) * sign for n, sign in spec_list]
        paths = {(n, sign) for n, sign in spec_list}
        for order in (list(range(len(batches))), shuffle.sample(range(len(batches)), len(batches))):
            ordered = [batches[i] for i in order]
            model = SignAndChunks()
            spec = specfx.Specializer(model, Policy(bool=True, iter=True), max_variants=16)
            assert spec.fit(iter(ordered)) is spec
            assert len(spec.variants) == len(paths)
            assert sorted(i for graph in spec.variants for i in graph.served_batches) == list(range(len(ordered)))
            traced = spec.stats.retraces
            for graph in spec.variants:
                for index in graph.served_batches:
                    assert torch.equal(graph(ordered[index]), model(ordered[index]))
            for batch in ordered:
                assert torch.equal(spec(batch), model(batch))
            assert spec.stats.retraces == traced

    def test_sizes_that_only_flow_into_ops_share_a_variant(self):
        """Under SHAPES, batch sizes and resolutions: one variant per resolution (the branch
        on the image size), not one per shape."""
        torch.manual_seed(0)
        model = PatchNet().eval()
        batches = [torch.randn(n, 3, s, s) for n, s in [(4, 32), (2, 48), (3, 32), (4, 48), (1, 32)]]
        spec = specfx.Specializer(model, Policy(shapes=True)).fit(batches)
        assert [graph.served_batches for graph in spec.variants] == [(0, 2, 4), (1, 3)]
        with torch.no_grad():
            for batch in batches:
                assert torch.equal(spec(batch), model(batch))
        assert spec.stats.retraces == 2
        assert "serves batches 0, 2, 4 of the set given to fit()" in spec.explain()

    def test_transformers_padded_batches_of_several_lengths(self):
        """BatchEncoding batches of three lengths and two batch sizes: one variant serves all."""
        transformers, model = _bert()
        batches = [_padded(transformers, size, length, pad, seed) for seed, (size, length, pad) in
                   enumerate([(2, 8, 3), (2, 12, 1), (3, 16, 5), (2, 8, 0)])]
        spec = specfx.Specializer(model, Policy(shapes=True)).fit(batches)
        assert [graph.served_batches for graph in spec.variants] == [(0, 1, 2, 3)]
        with torch.no_grad():
            for batch in batches:
                assert torch.equal(spec(**batch).last_hidden_state, model(**batch).last_hidden_state)
        assert spec.stats.retraces == 1

    def test_the_variant_limit_names_the_batch(self):
        """One variant too many: VariantLimitError naming the batch and what each variant assumes."""
        spec = specfx.Specializer(SignAndChunks(), Policy(bool=True, iter=True), max_variants=1)
        with pytest.raises(specfx.VariantLimitError) as caught:
            spec.fit([torch.ones(4), torch.ones(6)])
        assert str(caught.value).splitlines()[:2] == [
            "Specializer.fit: batch 1 needs a variant of its own and max_variants=1 is reached:",
            "  variant 0 (traced on batch 0 of fit()) assumes len(torch.split(x, 2, dim=0)) == 2 (seen 3)",
        ]

    def test_leaves_the_model_as_it_was(self):
        """Fitting checks and traces, nothing more: a train-mode BatchNorm's statistics stay."""
        model = nn.Sequential(nn.BatchNorm1d(3), nn.ReLU()).train()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        specfx.Specializer(model, Policy(shapes=True)).fit([torch.randn(4, 3), torch.randn(5, 3), torch.randn(4, 3)])
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())

    def test_a_calibration_option_is_refused(self):
        """calibration= belongs to fit, not to the Specializer's trace options."""
        with pytest.raises(TypeError, match=r"give a calibration set to spec.fit\(batches\)"):
            specfx.Specializer(SignAndChunks(), calibration=[torch.ones(2)])


def test_shuffled_sets_need_the_same_variants():
    """The count does not depend on the order (a fixed shuffle of a larger mixed set)."""
    batches = [torch.arange(1.0, n + 1) * sign for n in (4, 6, 8, 10) for sign in (1, -1) for _ in range(3)]
    counts = set()
    for seed in range(3):
        random.Random(seed).shuffle(batches)
        counts.add(len(specfx.Specializer(SignAndChunks(), "bool,iter", max_variants=8).fit(batches).variants))
    assert counts == {8}


class Tokens(nn.Module):
    """Sizes read as ints under SHAPES that only flow into ops, and a branch on data."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 6)
        self.proj = nn.Linear(6, 6)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        h = self.proj(h.view(b * s, -1)).view(b, s, -1)
        if attention_mask.sum() > 0:
            h = h * 2
        return h.mean(1)


def _tokens(size, length, sign, seed):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(size, length)
    mask[0, length // 2:] = 0
    return {"input_ids": torch.randint(0, 20, (size, length), generator=generator), "attention_mask": mask * sign}


class TestTraceFromASet:
    def test_one_path_is_the_plain_trace(self):
        """Batches that all take the example's path (same shapes): exactly the plain trace."""
        torch.manual_seed(0)
        model = Tokens()
        batches = [_tokens(2, 5, 1, seed) for seed in range(4)]
        plain = specfx.trace(model, example_kwargs=batches[0], policy=Policy(bool=True, shapes=True))
        gm = specfx.trace(model, policy=Policy(bool=True, shapes=True), calibration=batches)
        assert gm.code == plain.code
        assert gm.specializations == plain.specializations

    @settings(max_examples=15, deadline=None)
    @given(st.lists(st.tuples(st.integers(2, 4), st.integers(3, 9), st.sampled_from([1, 1, 1, -1])),
                    min_size=1, max_size=6))
    def test_sizes_stay_symbolic_and_differing_paths_are_refused(self, spec_list):
        """Batch sizes and lengths that only flow into ops: one graph, equal to eager on every
        batch; a batch whose data takes the other branch: refused, naming the first such batch."""
        torch.manual_seed(0)
        model = Tokens()
        batches = [_tokens(size, length, sign, seed) for seed, (size, length, sign) in enumerate(spec_list)]
        branches = [bool(b["attention_mask"].sum() > 0) for b in batches]
        differing = [index for index, branch in enumerate(branches) if branch != branches[0]]
        if differing:
            with pytest.raises(specfx.SpecializationError) as caught:
                specfx.trace(model, policy=Policy(bool=True, shapes=True), calibration=iter(batches))
            assert caught.value.batch == differing[0]
            assert caught.value.value is branches[differing[0]]
            return
        gm = specfx.trace(model, policy=Policy(bool=True, shapes=True), calibration=iter(batches))
        with torch.no_grad():
            for batch in batches:
                assert torch.equal(gm(**batch), model(**batch))
        assert specfx.coverage(gm, batches).covered

    def test_transformers_padded_batches_of_several_lengths(self):
        """BERT on BatchEncoding batches of three lengths and two batch sizes under SHAPES:
        one graph, equal to eager on every batch and on a length it never saw."""
        transformers, model = _bert()
        batches = [_padded(transformers, size, length, pad, seed) for seed, (size, length, pad) in
                   enumerate([(2, 8, 3), (2, 12, 1), (3, 16, 5), (2, 8, 0)])]
        gm = specfx.trace(model, policy=Policy(shapes=True), calibration=batches)
        unseen = _padded(transformers, 5, 11, 4, seed=9)
        with torch.no_grad():
            for batch in [*batches, unseen]:
                assert torch.equal(gm(**batch).last_hidden_state, model(**batch).last_hidden_state)

    def test_a_decision_that_differs_is_refused_naming_the_batch(self):
        """Two resolutions decide the position table's branch: the message names the batch, the
        decision, both values, the line and the way out."""
        torch.manual_seed(0)
        images = [torch.randn(4, 3, 32, 32), torch.randn(2, 3, 32, 32), torch.randn(2, 3, 48, 48),
                  torch.randn(3, 3, 48, 48)]
        with pytest.raises(specfx.SpecializationError) as caught:
            specfx.trace(PatchNet(), policy=Policy(shapes=True), calibration=images)
        line = line_of(PatchNet.forward, "if h != self.size")
        assert str(caught.value).splitlines() == [
            "batch 2 of the calibration set (2 batches fail: 2, 3) takes another path than the example (batch 0): "
            "the trace decided bool(h != 32) == False, but on batch 2 bool(h != 32) == True.",
            "One graph cannot serve both: keep a graph per path with specfx.Specializer(model, policy).fit(batches) "
            "(as few as the decisions need), or change the code so that this value does not decide the path.",
            f"  at {HERE}:{line}: if h != self.size or w != self.size:",
            "(specfx docs: docs/errors.md#specializationerror)",
        ]
        assert (caught.value.batch, caught.value.value, caught.value.flag) == (2, True, Specialize.SHAPES)

    def test_an_int_that_differs_is_refused(self):
        """range() of a size that differs: a real decision."""
        def rows(x):
            return torch.stack([x[i] * i for i in range(x.size(0))])

        with pytest.raises(specfx.SpecializationError, match=r"^batch 1 .* the trace decided "
                           r"x.size\(0\) == 3, but on batch 1 x.size\(0\) == 4"):
            specfx.trace(rows, torch.ones(3, 2), policy=Policy(shapes=True), calibration=[torch.ones(3, 5), torch.ones(4, 2)])

    def test_another_structure_is_refused(self):
        """A mask where the example had none is another path; another number of arguments
        another structure."""
        def masked(x, mask=None):
            return x if mask is None else x * mask

        with pytest.raises(specfx.SpecializationError) as caught:
            specfx.trace(masked, (torch.ones(2),), calibration=[(torch.ones(2),), {"x": torch.ones(2), "mask": torch.ones(2)}])
        assert str(caught.value).splitlines()[0] == (
            "batch 1 of the calibration set (the only batch that fails) takes another path than the example inputs: "
            "the trace decided mask is None, but on batch 1 mask is not None.")

        def double(x):
            return x * 2

        with pytest.raises(specfx.SpecializationError) as caught:
            specfx.trace(double, calibration=[torch.ones(2), (torch.ones(2), torch.ones(2))])
        assert str(caught.value).splitlines()[0] == (
            "batch 1 of the calibration set (the only batch that fails) has other inputs than the example (batch 0): "
            "the batch does not fit forward(x): too many positional arguments.")

    def test_arguments(self):
        """An empty set, a tensor for a set, progress= without a set, guards=False."""
        with pytest.raises(ValueError, match="calibration= needs guards"):
            specfx.trace(SignAndChunks(), policy="bool,iter", guards=False, calibration=[torch.ones(4)])
        with pytest.raises(ValueError, match="calibration= is empty"):
            specfx.trace(SignAndChunks(), calibration=[])
        with pytest.raises(TypeError, match="takes an iterable of batches"):
            specfx.trace(SignAndChunks(), calibration=torch.ones(3))
        with pytest.raises(TypeError, match="progress= goes with calibration="):
            specfx.trace(SignAndChunks(), torch.ones(4), policy="bool,iter", progress=True)

    def test_sizes_that_cannot_stay_symbolic(self, monkeypatch):
        """When tracing with symbolic sizes fails, the refusal says the sizes differ and why."""
        import contextlib

        from specfx._trace import calibration

        @contextlib.contextmanager
        def failing():
            raise RuntimeError("a library needs real ints here")
            yield

        monkeypatch.setattr(calibration, "deferred_shapes", failing)
        with pytest.raises(specfx.SpecializationError) as caught:
            specfx.trace(lambda x: x.view(x.size(0), -1), policy="shapes", calibration=[torch.ones(2, 3), torch.ones(4, 3)])
        assert str(caught.value).splitlines()[0] == (
            "batch 1 of the calibration set (the only batch that fails) has other sizes than the example (batch 0): "
            "the trace read x.size(0) == 2, but on batch 1 x.size(0) == 4; tracing again with the sizes kept "
            "symbolic failed (RuntimeError: a library needs real ints here).")
        assert caught.value.batch == 1
