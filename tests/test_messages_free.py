"""Formatting a traced value into a message is not a decision.

``torch._assert(h == 224, f"... got {h}")``, ``raise ValueError(f"... {n}")``,
``warnings.warn(f"...")`` and a logger's ``warning(...)`` format a traced value on
every call, but the text never changes what the model computes: no flag is asked
for and no guard emitted. A message the graph records (``torch._assert``) is built
from the run-time values, as eager builds it. Text used for anything else (compared,
hashed, kept in a name) is still a decision.
"""

from __future__ import annotations

import copy
import io
import logging
import pickle
import warnings

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError

from . import vision_models as V

LOGGER = logging.getLogger("specfx-test-messages")


def kinds(gm):
    return [str(s.kind) for s in gm.specializations]


class TestAssertMessages:
    def test_vit_traced_at_batch_2_runs_at_any_batch_with_no_flag(self):
        """torchvision's ViT checks the image size with torch._assert and an f-string of the
        unpacked height: traced with Policy(), the graph is batch-generic."""
        model = V.PatchViT().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16))
        assert not {"shape", "size", "value", "int"} & set(kinds(gm))
        for batch in (1, 3, 5):
            x = torch.randn(batch, 3, 16, 16)
            torch.testing.assert_close(gm(x), model(x))

    def test_the_recorded_message_shows_the_run_time_value(self):
        """The assertion the graph runs says what eager says: the height of this call's input."""
        model = V.PatchViT().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16))
        wrong = torch.randn(2, 3, 20, 16)
        with pytest.raises(AssertionError) as eager:
            model(wrong)
        with pytest.raises(AssertionError) as graph:
            gm(wrong)
        assert str(graph.value) == str(eager.value) == "Wrong image height! Expected 16 but got 20!"
        assert "specfx_format_message" in gm.code

    def test_the_message_survives_deepcopy_and_pickling(self):
        model = V.PatchViT().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16))
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        for copied in (copy.deepcopy(gm), pickle.loads(pickle.dumps(gm)),
                       torch.load(buffer, weights_only=False)):
            x = torch.randn(3, 3, 16, 16)
            torch.testing.assert_close(copied(x), model(x))
            with pytest.raises(AssertionError, match="but got 12!"):
                copied(torch.randn(1, 3, 12, 16))

    def test_a_whole_shape_in_the_message_under_shapes(self):
        """`f"... got {x.shape}"` read under SHAPES only for a message: no guard on the shape."""
        def f(x):
            torch._assert(x.dim() == 3, f"Expected (batch, seq, hidden), got {x.shape}")
            return x * 2

        gm = specfx.trace(f, torch.randn(2, 4, 8), policy=Policy(shapes=True))
        assert "shape" not in kinds(gm)
        x = torch.randn(5, 1, 3)
        torch.testing.assert_close(gm(x), f(x))
        with pytest.raises(GuardError, match="x.ndim == 3"):  # the dim() read under SHAPES: decided
            gm(torch.randn(5, 3))


class TestTextMessages:
    def test_timm_asserts_guard_the_condition_not_the_text(self):
        """`assert H == 16, f"..."` decides the condition (BOOL, guarded); its message, and a
        `%` message, are formatted only when it fails."""
        model = V.TimmPatchEmbed().eval()
        gm = specfx.trace(model, torch.randn(2, 3, 16, 16), policy=Policy(bool=True))
        assert set(kinds(gm)) <= {"bool", "unpack"}
        x = torch.randn(4, 3, 16, 16)
        torch.testing.assert_close(gm(x), model(x))
        with pytest.raises(GuardError):
            gm(torch.randn(2, 3, 20, 16))

    def test_an_exception_raised_while_tracing_shows_the_value(self):
        """A model that raises while tracing raises its own error with eager's text, not a
        SpecializationError about formatting."""
        def f(x):
            n = x.shape[0]
            raise ValueError(f"batch {n} is not supported")

        with pytest.raises(ValueError, match="^batch 2 is not supported$"):
            specfx.trace(f, torch.randn(2, 3))

    def test_warnings_and_log_lines_are_free(self, caplog):
        def f(x):
            n, d = x.shape
            warnings.warn(f"a batch of {n} rows of {d}", stacklevel=2)
            LOGGER.warning("rows: %s", n)
            LOGGER.warning(f"rows again: {n}")
            LOGGER.warning("rows: %d" % n)
            return x.sum(0)

        with caplog.at_level(logging.WARNING):
            gm = specfx.trace(f, torch.randn(2, 3))
        assert "rows again: 2" in caplog.text and "rows: 2" in caplog.text
        assert kinds(gm) == ["unpack"]
        x = torch.randn(7, 3)
        # warnings.warn in model code is a graph call: the graph warns (with the text formatted
        # while tracing), and the flag-free graph serves every batch
        with pytest.warns(UserWarning, match="a batch of 2 rows of 3"):
            torch.testing.assert_close(gm(x), x.sum(0))

    def test_multimodal_placeholder_check(self):
        """transformers' get_placeholder_mask formats a token count (data) and a feature count
        (shapes) into the text of a ValueError raised only on a mismatch."""
        class Merge(nn.Module):
            def forward(self, ids, embeds, features):
                mask = ids == 7
                n_tokens = mask.sum()
                n_features = features.shape[0] * features.shape[1]
                torch._assert(n_tokens == n_features,
                              f"Image features and image tokens do not match: tokens: {n_tokens}, features {n_features}")
                mask = mask.unsqueeze(-1).expand_as(embeds)
                return embeds.masked_scatter(mask, features)

        model = Merge()
        ids = torch.tensor([[1, 7, 7, 2], [7, 3, 4, 5]])
        gm = specfx.trace(model, (ids, torch.zeros(2, 4, 3), torch.ones(1, 3, 3)))
        other = (torch.tensor([[7, 7, 1]]), torch.zeros(1, 3, 3), torch.ones(1, 2, 3))
        torch.testing.assert_close(gm(*other), model(*other))
        with pytest.raises(AssertionError, match="tokens: 2, features 3"):
            gm(torch.tensor([[7, 7, 1]]), torch.zeros(1, 3, 3), torch.ones(1, 3, 3))


class TestMessagesKeptInANameFirst:
    """Library code builds the message first and raises or warns later (transformers'
    deprecate_kwarg: `message = f"... {kwargs[new_name]} ..."`, then `if message is not None`,
    `raise ValueError(message)` or `warnings.warn(message)`): every use of the name feeds a
    message, so the formatting is free too."""

    def test_assert_message_in_a_name_is_built_at_run_time(self):
        def f(x):
            message = f"rows: {x.shape[0]}"
            message = message + " (three columns expected)"
            torch._assert(x.shape[1] == 3, message)
            return x * 2

        gm = specfx.trace(f, torch.ones(2, 3))
        assert kinds(gm) == []
        torch.testing.assert_close(gm(torch.ones(5, 3)), f(torch.ones(5, 3)))
        with pytest.raises(AssertionError) as eager:
            f(torch.ones(4, 4))
        with pytest.raises(AssertionError) as graph:
            gm(torch.ones(4, 4))
        assert str(graph.value) == str(eager.value) == "rows: 4 (three columns expected)"

    def test_deprecation_message_of_an_object_input(self):
        """The formatted value is an object passed in (a cache): no flag, and the graph equals eager."""
        class Store:
            def __init__(self, t):
                self.t = t

            def __repr__(self):
                return f"Store({tuple(self.t.shape)})"

        def renamed(fn):
            def wrapped(x, **kwargs):
                message = None
                if "old" in kwargs and "new" in kwargs:
                    message = f"Both set: using new={kwargs['new']}, ignoring old={kwargs['old']}."
                    kwargs.pop("old")
                if message is not None:
                    warnings.warn(message, FutureWarning, stacklevel=2)
                return fn(x, **kwargs)
            return wrapped

        @renamed
        def f(x, new=None, old=None):
            return x + new.t

        store = Store(torch.ones(3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            gm = specfx.trace(f, (torch.zeros(3),), {"new": store, "old": store})
            torch.testing.assert_close(gm(torch.ones(3), new=store, old=store), f(torch.ones(3), new=store, old=store))


class TestStillDecisions:
    def test_compared_text_is_a_decision(self):
        def f(x):
            return x * 2 if f"{x.shape[0]}" == "2" else x

        with pytest.raises(SpecializationError, match="formatting"):
            specfx.trace(f, torch.ones(2, 3))

    def test_text_kept_in_a_name_and_used_otherwise_is_a_decision(self):
        """Text stored in a variable that is also used for something else (returned, compared):
        a decision, as before."""
        def f(x):
            message = f"rows: {x.shape[0]}"
            torch._assert(x.shape[1] == 3, message)
            return x, message

        with pytest.raises(SpecializationError, match="formatting"):
            specfx.trace(f, torch.ones(2, 3))
        gm = specfx.trace(f, torch.ones(2, 3), policy=Policy(shapes=True))
        with pytest.raises(GuardError):
            gm(torch.ones(4, 3))
