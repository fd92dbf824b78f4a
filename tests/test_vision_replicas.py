"""torchvision/timm-style vision models traced as users call them: one graph for every
batch size (and resolution, where the architecture allows), equal to eager.

Per-dimension shape guards: a shape unpacked into names (``n, c, h, w = x.shape``) under
SHAPES guards only the names the code reads as ints, each as its dimension
(``x.size(2) == 8``), never the whole shape because one dimension was read.
"""

from __future__ import annotations

import pytest
import torch

import specfx
from specfx import GuardError, Policy

from . import vision_models as V


def equal_on(gm, model, *inputs):
    for x in inputs:
        torch.testing.assert_close(gm(x), model(x))


@pytest.mark.parametrize("policy", [Policy(), Policy(shapes=True)], ids=["none", "shapes"])
class TestBatchGeneric:
    def test_densenet_feature_list(self, policy):
        """DenseNet keeps the input in a list, reads it with torch.cat, appends the result and
        reads it again (the trace failed with an internal 'no value for node' error)."""
        model = V.DenseNet().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 8, 8), policy=policy)
        assert gm.specializations == []
        equal_on(gm, model, torch.randn(3, 3, 8, 8), torch.randn(1, 3, 12, 10))

    def test_efficientnet(self, policy):
        model = V.EfficientNet().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16), policy=policy)
        equal_on(gm, model, torch.randn(3, 3, 20, 20), torch.randn(1, 3, 16, 16))

    def test_swin_window_padding_stays_symbolic(self, policy):
        """The pad amounts are computed from the unpacked sizes and only flow into ops."""
        model = V.WindowAttention().eval()
        gm = specfx.trace(model, torch.randn(2, 8, 8, 16), policy=policy)
        assert {str(s.kind) for s in gm.specializations} == {"unpack"}
        equal_on(gm, model, torch.randn(3, 8, 8, 16), torch.randn(2, 6, 10, 16))


class TestSwinPaddingBranch:
    def test_the_guard_failure_says_a_specializer_is_the_answer_and_it_is(self):
        """transformers' Swin crops back only if it padded: a branch on the size, rightly guarded.
        The GuardError for a size that pads says how to keep a graph per way (a Specializer), and
        following it serves both ways, equal to eager."""
        model = V.PaddedWindowAttention().eval()
        gm = specfx.trace(model, torch.randn(2, 8, 8, 16), policy=Policy(bool=True))
        equal_on(gm, model, torch.randn(3, 8, 12, 16))
        with pytest.raises(GuardError) as failed:
            gm(torch.randn(2, 6, 10, 16))
        message = str(failed.value)
        assert "assumed at tests/vision_models.py" in message and "was_padded = pad_values[3] > 0" in message
        assert ("Keep a graph per way with a Specializer, called as the model is: "
                "spec = specfx.Specializer(model, policy), then spec(...) traces a variant") in message
        assert "narrow the policy" not in message  # no policy keeps a branch symbolic
        spec = specfx.Specializer(model, Policy(bool=True))
        for x in (torch.randn(2, 8, 8, 16), torch.randn(2, 6, 10, 16), torch.randn(1, 5, 7, 16),
                  torch.randn(4, 4, 12, 16)):
            torch.testing.assert_close(spec(x), model(x))
        assert len(spec.variants) == 2


class TestPerDimensionGuards:
    def test_mobilevit_guards_height_and_width_not_the_batch(self):
        """MobileViT unpacks `features.shape` and reads the patch counts as ints: under SHAPES
        the graph holds for every batch size and raises GuardError for another resolution
        (it guarded the whole shape, batch included)."""
        model = V.MobileViTBlock().eval()
        gm = specfx.trace(model, torch.randn(2, 8, 8, 8), policy=Policy(shapes=True))
        assert "shape" not in {str(s.kind) for s in gm.specializations}
        equal_on(gm, model, torch.randn(1, 8, 8, 8), torch.randn(5, 8, 8, 8))
        with pytest.raises(GuardError, match="orig_height"):
            gm(torch.randn(2, 8, 6, 6))

    def test_vit_traced_at_batch_2_runs_at_1_3_5_under_shapes(self):
        """torchvision's ViT stores `n = x.shape[0]` and passes it to expand() and reshape():
        traced at batch 2 under SHAPES, no policy beyond it, the graph reads the batch when it
        runs and serves batches 1, 3 and 5 (it guarded x.size(0) == 2)."""
        model = V.PatchViT().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16), policy=Policy(shapes=True))
        assert not {"shape", "size"} & {str(s.kind) for s in gm.specializations}
        equal_on(gm, model, *(torch.randn(batch, 3, 16, 16) for batch in (1, 3, 5)))

    def test_a_stored_dimension_is_decided_where_it_is_needed_as_an_int(self):
        """`n = x.shape[0]` / `b = x.size(1)` kept in a name: a size read while it only flows into
        ops, decided as its dimension (`x.size(0) == 2`) where the code needs an int."""
        def into_ops(x):
            n = x.shape[0]
            b = x.size(1)
            return x.reshape(n, b, -1).expand(n, b, 2) + torch.zeros(n, 1, 1)

        def needs_an_int(x):
            n = x.shape[0]
            return torch.stack([x[i] for i in range(n)]) * 2

        gm = specfx.trace(into_ops, torch.randn(2, 3, 1), policy=Policy(shapes=True))
        assert not {"shape", "size"} & {str(s.kind) for s in gm.specializations}
        equal_on(gm, into_ops, torch.randn(5, 4, 1), torch.randn(1, 1, 1))
        gm = specfx.trace(needs_an_int, torch.randn(2, 3), policy=Policy(shapes=True))
        assert [s.guard_description for s in gm.specializations] == ["x.size(0) == 2"]
        equal_on(gm, needs_an_int, torch.randn(2, 7))
        with pytest.raises(GuardError, match=r"x.size\(0\) == 2"):
            gm(torch.randn(3, 3))

    def test_a_shape_built_from_size_and_stored_stays_a_read(self):
        """transformers' attention (MobileViT's, BERT's) stores `context.size()[:-2] + (all_head_size,)`
        and hands it to view(): under SHAPES that whole size is read when the graph runs (it guarded
        `context_layer.shape == (8, 4, 2, 8)`, tying the graph to the batch)."""
        def merge_heads(context):
            new_shape = context.size()[:-2] + (16,)
            return context.view(new_shape) * 2

        gm = specfx.trace(merge_heads, torch.randn(2, 4, 2, 8), policy=Policy(shapes=True))
        assert not {"shape", "size"} & {str(s.kind) for s in gm.specializations}
        equal_on(gm, merge_heads, torch.randn(5, 3, 2, 8), torch.randn(1, 1, 4, 4))

    def test_transformers_mobilevit_under_shapes_serves_every_batch(self):
        """MobileViT's patch counts (`int(math.ceil(orig_height / patch_height) * ...)`) guard the
        resolution; nothing guards the batch."""
        transformers = pytest.importorskip("transformers")
        torch.manual_seed(0)
        model = transformers.MobileViTModel(transformers.MobileViTConfig(
            image_size=32, patch_size=2, hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 16, 16, 16, 16, 32],
            num_attention_heads=2)).eval()
        with pytest.warns(specfx.SpecializationWarning, match="orig_height"):  # (the tiny last stage: 2x2)
            gm = specfx.trace(model, torch.randn(2, 3, 32, 32), policy=Policy(shapes=True))
        assert not {"shape", "size"} & {str(s.kind) for s in gm.specializations}
        with torch.no_grad():
            for batch in (1, 3):
                x = torch.randn(batch, 3, 32, 32)
                torch.testing.assert_close(gm(x).last_hidden_state, model(x).last_hidden_state)
        with pytest.raises(GuardError, match="orig_height"):
            gm(torch.randn(2, 3, 64, 64))

    def test_unpacked_dims_read_as_ints_guard_those_dims(self):
        """`n, c, h, w = x.shape` with only `h` and `w` read as ints guards exactly those two."""
        def f(x):
            n, c, h, w = x.shape
            rows = [x[:, :, i].sum(-1) for i in range(h)]
            return torch.stack(rows, -1) * int(w)

        gm = specfx.trace(f, torch.randn(2, 3, 4, 5), policy=Policy(shapes=True))
        guarded = [s.guard_description for s in gm.specializations if str(s.kind) != "unpack"]
        assert guarded == ["x.size(2) == 4", "x.size(3) == 5"]
        equal_on(gm, f, torch.randn(7, 1, 4, 5))
        with pytest.raises(GuardError, match=r"x.size\(3\) == 5"):
            gm(torch.randn(2, 3, 4, 6))

    def test_unpacked_size_call(self):
        """`b, t = x.size()` is unpacked too: only `t` is decided (in the range)."""
        def f(x):
            b, t = x.size()
            return sum(x[:, i] for i in range(t)) + b

        gm = specfx.trace(f, torch.randn(2, 3), policy=Policy(shapes=True))
        assert [s.guard_description for s in gm.specializations if str(s.kind) != "unpack"] == ["x.size(1) == 3"]
        equal_on(gm, f, torch.randn(6, 3))

    def test_a_predicate_on_an_unpacked_dim_is_guarded_as_the_predicate(self):
        def f(x):
            n, d = x.shape
            return x * 2 if d > 2 else x

        gm = specfx.trace(f, torch.randn(2, 3), policy=Policy(shapes=True))
        equal_on(gm, f, torch.randn(5, 4), torch.randn(1, 9))
        with pytest.raises(GuardError, match=r"bool\(d > 2\)"):
            gm(torch.randn(2, 2))

    def test_without_shapes_an_int_of_a_dim_is_refused_naming_the_flag(self):
        def f(x):
            n, d = x.shape
            return x[:, : int(d) - 1]

        with pytest.raises(specfx.SpecializationError, match="SHAPES"):
            specfx.trace(f, torch.randn(2, 3))
