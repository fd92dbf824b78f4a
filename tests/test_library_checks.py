"""What libraries' model code does around the computation: checks that raise, hooks it installs.

- ``torch._check(cond, msg)`` and its kin (``_check_with``, ``_check_tensor_all(_with)``) with
  a traced condition are an assertion the graph makes on every call, not a guarded decision:
  the trace needs no flag, and an input that breaks the check raises from the graph with the
  message built from its own values.
- A library's check function that raises with the text it is given (transformers 5's
  ``torch_compilable_check(cond, f"... {n}")``) is a message sink once registered.
- Hooks that forward registers while traced (transformers installs its output-collecting
  hooks on the first call that asks for hidden states) are not left on the model.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specfx
from specfx._frames.message_flow import GRAPH, register_message_function


class CheckedSum(nn.Module):
    """Checks that every value is positive before summing them, as torch's own checks do."""

    def forward(self, x):
        torch._check_tensor_all_with(ValueError, x > 0, lambda: "x must be positive")
        return x.sum(-1)


def library_check(cond, msg):
    """A library's check: the text is only the message of the error it raises."""
    if callable(cond):
        cond = cond()
    torch._check_tensor_all_with(ValueError, cond, lambda: msg)


register_message_function(library_check, GRAPH)


class TokensMatchFeatures(nn.Module):
    """LLaVA's check that the image tokens match the image features, with its f-string."""

    def forward(self, ids, features):
        n_tokens = (ids == 7).sum()
        n_features = features.shape[0]
        library_check(n_tokens == n_features, f"tokens: {n_tokens}, features: {n_features}")
        return features * 2


class TestChecksAreGraphAssertions:
    def test_a_traced_condition_needs_no_flag_and_is_checked_on_every_call(self):
        """Traced with the default policy (no bool, no scalars): the check is a torch._assert
        node, the graph equals eager on other inputs, and fails where eager fails."""
        model = CheckedSum()
        gm = specfx.trace(model, (torch.rand(2, 3) + 1,))
        assert "torch._assert" in gm.code and not gm.specializations
        x = torch.rand(4, 5) + 1
        assert torch.equal(gm(x), model(x))
        bad = -torch.ones(2, 3)
        with pytest.raises(ValueError, match="x must be positive"):
            model(bad)
        with pytest.raises(AssertionError, match="ValueError: x must be positive"):
            gm(bad)

    def test_a_check_that_fails_while_tracing_raises_as_eager(self):
        with pytest.raises(AssertionError, match="x must be positive"):
            specfx.trace(CheckedSum(), (-torch.ones(2, 3),))

    def test_a_library_checks_f_string_is_formatted_when_the_graph_runs(self):
        """The f-string formats traced values for a registered check: no decision while
        tracing; the graph's failing check shows the values of the call that failed."""
        ids = torch.tensor([[1, 7, 7, 2]])
        gm = specfx.trace(TokensMatchFeatures(), (ids, torch.ones(2, 4)))
        assert not gm.specializations
        other = torch.tensor([[7, 7, 7, 1, 1]])
        assert torch.equal(gm(other, torch.ones(3, 4)), torch.ones(3, 4) * 2)
        with pytest.raises(ValueError, match="tokens: 3, features: 2"):
            TokensMatchFeatures()(other, torch.ones(2, 4))
        with pytest.raises(AssertionError, match="tokens: 3, features: 2"):
            gm(other, torch.ones(2, 4))

    def test_a_condition_on_sizes_is_checked_by_the_graph(self):
        class TwoD(nn.Module):
            def forward(self, x):
                torch._check(x.dim() == 2, lambda: "2-D please")
                return x + 1

        gm = specfx.trace(TwoD(), (torch.ones(2, 3),))
        assert torch.equal(gm(torch.ones(4, 1)), torch.ones(4, 1) + 1)
        with pytest.raises(AssertionError, match="RuntimeError: 2-D please"):
            gm(torch.ones(2, 3, 4))

    def test_a_python_condition_runs_torchs_own_check(self):
        class Configured(nn.Module):
            strict = False

            def forward(self, x):
                torch._check(not self.strict, lambda: "strict mode is not supported")
                return x + 1

        gm = specfx.trace(Configured(), (torch.ones(2, 3),))
        assert "torch._assert" not in gm.code
        strict = Configured()
        strict.strict = True
        with pytest.raises(RuntimeError, match="strict mode is not supported"):
            specfx.trace(strict, (torch.ones(2, 3),))


def _noted(module, args, output):
    """A forward hook that changes nothing (what it does is not the point here)."""


class HooksOnFirstCall(nn.Module):
    """Installs a forward hook on its layer the first time it runs and marks itself as hooked,
    as transformers installs its output-collecting hooks (with this very flag)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x):
        if not getattr(self, "_output_capturing_hooks_installed", False):
            self.layer.register_forward_hook(_noted)
            self._output_capturing_hooks_installed = True
        return self.layer(x)


class TestHooksInstalledWhileTraced:
    def test_the_model_keeps_its_hooks_and_flags(self):
        model = HooksOnFirstCall()
        tables = {name: dict(getattr(model.layer, name)) for name in vars(model.layer) if "_hooks" in name}
        gm = specfx.trace(model, (torch.randn(2, 3),))
        assert {name: dict(getattr(model.layer, name)) for name in tables} == tables
        assert not hasattr(model, "_output_capturing_hooks_installed")
        x = torch.randn(2, 3)
        assert torch.equal(gm(x), model(x))  # eager installs its hook once, as if never traced
        assert list(model.layer._forward_hooks.values()) == [_noted]

    def test_hooks_there_before_the_trace_stay(self):
        model = HooksOnFirstCall()
        model(torch.randn(2, 3))
        hooks = dict(model.layer._forward_hooks)
        specfx.trace(model, (torch.randn(2, 3),))
        assert dict(model.layer._forward_hooks) == hooks and model._output_capturing_hooks_installed
