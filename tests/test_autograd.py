"""Custom autograd Functions and activation checkpointing: the graph's gradients are eager's
(the gradient oracle of tests/oracles.py: outputs, and every leaf's ``.grad``)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from torch import nn

import specfx
from specfx import SpecializationError

from .oracles import assert_same_gradients

from torch.autograd import grad as held_grad  # (bound before any trace)


class RoundSTE(torch.autograd.Function):
    """Straight-through rounding, as in every QAT fake-quantizer: round forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


# held as a bound method made at import, as libraries export their Functions
# (Brevitas: `round_ste_impl = RoundSteFn.apply`)
round_ste = RoundSTE.apply


class ScaledSquare(torch.autograd.Function):
    """A backward that is not forward's derivative, reading what forward saved on ``ctx``."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * ctx.k, None


class NeedsGrad(torch.autograd.Function):
    """Forward that branches on ``ctx.needs_input_grad``."""

    @staticmethod
    def forward(ctx, x, w):
        return x * w + 1 if ctx.needs_input_grad[1] else x * w

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class SumAndProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x + y, x * y

    @staticmethod
    def backward(ctx, grad_sum, grad_product):
        return grad_sum + 5 * grad_product, -grad_sum


class StochasticRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.floor(x + torch.rand_like(x))

    @staticmethod
    def backward(ctx, grad):
        return grad


class LearnedStepQuantizer(nn.Module):
    """LSQ-style: a Function of an activation and a learnable scale."""

    class Quantize(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x, scale)
            return torch.round(x / scale).clamp(-8, 7) * scale

        @staticmethod
        def backward(ctx, grad):
            x, scale = ctx.saved_tensors
            inside = ((x / scale) >= -8) & ((x / scale) <= 7)
            return grad * inside, (grad * (torch.round(x / scale) - x / scale)).sum().reshape(scale.shape)

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.tensor(0.3))

    def forward(self, x):
        return self.Quantize.apply(self.linear(x), self.scale)


def randn(*shape, grad=False):
    return torch.randn(*shape).mul(3).requires_grad_(grad)


class TestCustomFunctions:
    def test_straight_through_estimator_keeps_its_backward(self):
        """The STE's identity backward, not round's zero gradient."""
        def f(x):
            return RoundSTE.apply(x) * 2

        gm = specfx.trace(f, (randn(4, grad=True),))
        assert_same_gradients(f, gm, (randn(4, grad=True),))
        x = randn(4, grad=True)
        gm(x).sum().backward()
        assert torch.equal(x.grad, torch.full((4,), 2.0))

    def test_apply_held_before_the_trace_keeps_its_backward(self):
        """`round_ste = RoundSTE.apply` taken at import reaches the graph call as `RoundSTE.apply` does
        (its forward was traced through: round's zero gradient); once the trace is over, it runs
        the Function's own code again."""
        def f(x):
            return round_ste(x) * 2

        gm = specfx.trace(f, (randn(4, grad=True),))
        assert "RoundSTE" in gm.code
        assert_same_gradients(f, gm, (randn(4, grad=True),))
        assert torch.autograd.Function.apply.__func__.__code__.co_name == "apply"
        assert "_specfx" not in " ".join(torch.autograd.Function.apply.__func__.__code__.co_names)
        assert not [name for name in vars(torch.autograd.function) if name.startswith("_specfx")]

    def test_backward_reads_what_forward_saved(self):
        def f(x):
            return ScaledSquare.apply(x, 2.0).sum(0)

        gm = specfx.trace(f, (randn(3, 2, grad=True),))
        assert_same_gradients(f, gm, (randn(5, 2, grad=True),))

    @pytest.mark.parametrize("weight_grad", [True, False])
    def test_needs_input_grad_reads_the_callers_tensors(self, weight_grad):
        """Traced with a weight that requires grad, called with one that does or does not."""
        def f(x, w):
            return NeedsGrad.apply(x, w)

        gm = specfx.trace(f, (randn(3), randn(3, grad=True)))
        assert_same_gradients(f, gm, (randn(3), randn(3, grad=weight_grad)))

    def test_two_outputs(self):
        def f(x, y):
            total, product = SumAndProduct.apply(x, y)
            return total * product

        gm = specfx.trace(f, (randn(3, grad=True), randn(3, grad=True)))
        assert_same_gradients(f, gm, (randn(3, grad=True), randn(3, grad=True)))

    def test_learnable_scale_gets_eagers_gradient(self):
        model = LearnedStepQuantizer()
        gm = specfx.trace(model, (randn(2, 4),))
        assert_same_gradients(model, gm, (randn(5, 4),), module=model)

    def test_the_graph_calls_the_function(self):
        """One node calls the Function, which the graph module holds (the user's model does not)."""
        model = LearnedStepQuantizer()
        gm = specfx.trace(model, (randn(2, 4),))
        assert "apply(" in gm.code and "torch.round" not in gm.code
        assert not [name for name in vars(model) if "autograd" in name]

    def test_a_drawing_forward_draws_as_eager_and_the_trace_draws_nothing(self):
        def f(x):
            return StochasticRound.apply(x) * 2

        example = randn(5)
        state = torch.get_rng_state()
        gm = specfx.trace(f, (example,))
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(3)
        expected = f(example)
        torch.manual_seed(3)
        assert torch.equal(gm(example), expected)

    def test_deepcopy_save_load_and_retrace_keep_the_backward(self):
        model = LearnedStepQuantizer()
        gm = specfx.trace(model, (randn(2, 4),))
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        for other in (copy.deepcopy(gm), loaded, specfx.trace(gm, (randn(2, 4),))):
            assert "apply(" in other.code
            assert_same_gradients(model, other, (randn(3, 4, grad=True),))  # (the input's gradient)

    def test_an_argument_no_graph_can_hold_is_refused_naming_the_function(self):
        class WithCallback(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, callback):
                return callback(x)

            @staticmethod
            def backward(ctx, grad):
                return grad, None

        def f(x):
            return WithCallback.apply(x, torch.relu)

        with pytest.raises(SpecializationError, match=r"(?s)WithCallback.apply\(\.\.\.\)` is called with an "
                                                      r"argument a graph cannot hold.*Fix: pass it tensors"):
            specfx.trace(f, (randn(3),))


class Checkpointed(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.reentrant = reentrant

    def forward(self, x):
        hidden = checkpoint.checkpoint(lambda t: torch.relu(self.first(t)), x, use_reentrant=self.reentrant)
        return self.second(hidden)


class TestCheckpoint:
    @pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True")  # eager's, reentrant
    @pytest.mark.parametrize("reentrant", [True, False])
    @pytest.mark.parametrize("input_grad", [True, False])
    def test_gradients_are_eagers(self, reentrant, input_grad):
        """Reentrant: the layers inside train when an input requires grad, and get no gradient
        when none does (as in eager); non-reentrant: they always train."""
        model = Checkpointed(reentrant)
        gm = specfx.trace(model, (randn(2, 4, grad=input_grad),))
        assert_same_gradients(model, gm, (randn(3, 4, grad=input_grad),), module=model)

    def test_reentrant_traced_without_input_grad_called_with_it(self):
        model = Checkpointed(True)
        gm = specfx.trace(model, (randn(2, 4),))
        assert_same_gradients(model, gm, (randn(3, 4, grad=True),), module=model)

    def test_checkpoint_sequential(self):
        class Sequence(nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.layers = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

            def forward(self, x):
                return checkpoint.checkpoint_sequential(self.layers, 2, x, use_reentrant=True)

        model = Sequence()
        gm = specfx.trace(model, (randn(2, 4, grad=True),))
        assert_same_gradients(model, gm, (randn(3, 4, grad=True),), module=model)


class TestGradientsInForward:
    """`torch.autograd.grad` and `Tensor.register_hook` inside forward: graph calls, so the graph's
    outputs and gradients are eager's; `backward()` inside forward is refused (the trace would
    accumulate into the model's `.grad`)."""

    def test_autograd_grad_in_forward_is_a_graph_call(self):
        class InputGradient(nn.Module):  # a gradient penalty, second order
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(3, 3)

            def forward(self, x):
                energy = self.lin(x).pow(2).sum()
                (force,) = torch.autograd.grad(energy, x, create_graph=True)
                (weight_grad,) = torch.autograd.grad(energy, self.lin.weight, create_graph=True)
                return force * 2 + x @ weight_grad.t()

        torch.manual_seed(0)
        model = InputGradient()
        example = randn(2, 3, grad=True)
        gm = specfx.trace(model, example)
        assert "torch.autograd.grad" in gm.code
        assert model.lin.weight.grad is None and example.grad is None  # the trace took no gradient into them
        assert_same_gradients(model, gm, (randn(4, 3, grad=True),), model)

    def test_autograd_grad_held_by_name_is_a_graph_call_too(self):
        """`from torch.autograd import grad` binds the function before the trace: caught all the same."""

        def force(x):
            (g,) = held_grad((x * x * x).sum(), x, create_graph=True)
            return g

        gm = specfx.trace(force, randn(3, grad=True))
        assert "torch.autograd.grad" in gm.code
        assert_same_gradients(force, gm, (randn(3, grad=True),))

    @pytest.mark.parametrize("hook", ["lambda", "method", "module_function"])
    def test_register_hook_in_forward_is_registered_by_the_graph(self, hook):
        class HookedGrad(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 10.0

            def scaled(self, grad):
                return grad * self.scale

            def forward(self, x):
                y = x * 2
                if y.requires_grad:
                    y.register_hook({"lambda": lambda g: g * 10, "method": self.scaled,
                                     "module_function": _negated}[hook])
                return y.sum(dim=-1)

        model = HookedGrad()
        gm = specfx.trace(model, randn(2, 3, grad=True))
        assert "register_hook" in gm.code
        assert_same_gradients(model, gm, (randn(2, 3, grad=True),), model)
        with torch.no_grad():  # without grad eager registers nothing, and the graph neither
            gm = specfx.trace(model, randn(2, 3))
        assert torch.equal(gm(torch.ones(2, 3)), model(torch.ones(2, 3)))

    def test_a_hook_holding_a_value_of_the_forward_is_refused(self):
        def f(x):
            y = x * 2
            z = x + 1
            y.register_hook(lambda g: g * z)
            return (y * z).sum()

        with pytest.raises(SpecializationError, match=r"(?s)`y.register_hook\(hook\)` registers a hook that holds a "
                                                      r"value of this forward \(z\).*Fix: compute inside the hook"):
            specfx.trace(f, randn(3, grad=True))

    @pytest.mark.parametrize("call", ["loss.backward()", "torch.autograd.backward(loss)"])
    def test_backward_in_forward_is_refused_and_leaves_the_model_as_it_was(self, call):
        namespace = {"torch": torch}
        exec(f"def forward(self, x):\n    loss = self.lin(x).sum()\n    {call}\n    return loss\n", namespace)
        model = type("Trains", (nn.Module,), {"forward": namespace["forward"]})()
        model.lin = nn.Linear(3, 3)
        model.lin.weight.grad = torch.ones(3, 3)
        with pytest.raises(SpecializationError, match=r"(?s)backward\(\) inside the traced code: the trace would run it "
                                                      r"on the example values.*Fix: call backward on the graph's output"):
            specfx.trace(model, torch.ones(2, 3))
        assert torch.equal(model.lin.weight.grad, torch.ones(3, 3)) and model.lin.bias.grad is None


def _negated(grad):
    return -grad
