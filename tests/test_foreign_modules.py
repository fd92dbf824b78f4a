"""Modules the traced model calls but does not own (built in forward, module-level, kept in
plain containers): installed on the graph under generated names, never on the model."""

import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import specfx
from specfx.errors import SpecializationError

from torch.func import functional_call as held_functional_call  # (bound before any trace)


class Gelu(nn.Module):
    """A user's activation module (not torch.nn's, so traced through)."""

    def forward(self, x):
        return F.gelu(x) * 1.5


GELU = Gelu()  # a module-level activation, as `ACT2FN["gelu"]`
SHARED_PROJECTION = nn.Linear(3, 3)  # a module-level layer with parameters the model does not own


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 3)
        self.pool_width = 2

    def forward(self, x, labels):
        logits = self.proj(x)
        loss = nn.CrossEntropyLoss()(logits, labels)
        probs = nn.Softmax(dim=-1)(logits)
        pooled = nn.MaxPool1d(self.pool_width)(x.unsqueeze(1)).squeeze(1)
        return loss, probs, nn.ReLU()(pooled), GELU(logits), SHARED_PROJECTION(logits)


def _inputs(batch=4):
    return torch.randn(batch, 6, requires_grad=True), torch.randint(0, 3, (batch,))


def _assert_same(graph_outputs, eager_outputs):
    assert len(graph_outputs) == len(eager_outputs)
    for got, expected in zip(graph_outputs, eager_outputs):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_modules_built_in_forward_and_module_level_ones_run_as_in_eager():
    model = Head()
    names_before = [name for name, _ in model.named_modules()]
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    x, labels = _inputs()
    gm = specfx.trace(model, (x, labels))
    for batch in (4, 7):  # another batch size: nothing about the modules is frozen
        x, labels = _inputs(batch)
        x_eager = x.detach().clone().requires_grad_(True)
        graph_out, eager_out = gm(x, labels), model(x_eager, labels)
        _assert_same(graph_out, eager_out)
        sum(o.sum() for o in graph_out).backward()
        sum(o.sum() for o in eager_out).backward()
        torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)
    # the model is untouched: no generated submodule, same state
    assert [name for name, _ in model.named_modules()] == names_before
    assert not any(name.startswith("_specfx") for name in vars(model))
    assert all(torch.equal(v, state_before[k]) for k, v in model.state_dict().items())


def test_the_graph_with_generated_submodules_pickles_and_reloads():
    model = Head()
    x, labels = _inputs()
    gm = specfx.trace(model, (x, labels))
    generated = sorted(name for name, _ in gm.named_children() if name.startswith("_specfx_module"))
    # CrossEntropyLoss, Softmax, MaxPool1d, ReLU and the shared Linear (GELU, not torch.nn's, is traced through)
    assert len(generated) == 5
    loaded = pickle.loads(pickle.dumps(gm))
    x, labels = _inputs(5)
    _assert_same(loaded(x, labels), model(x, labels))


def test_a_module_level_layer_is_read_live_like_a_submodule():
    """The graph calls the same object eager calls: a later change of its weights shows."""
    model = Head()
    x, labels = _inputs()
    gm = specfx.trace(model, (x, labels))
    with torch.no_grad():
        saved = SHARED_PROJECTION.weight.clone()
        SHARED_PROJECTION.weight.mul_(2)
    try:
        _assert_same(gm(x, labels), model(x, labels))
    finally:
        with torch.no_grad():
            SHARED_PROJECTION.weight.copy_(saved)


def test_a_module_reached_twice_is_installed_once():
    relu = nn.ReLU()

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.acts = [relu]  # a plain list: torch does not register it

        def forward(self, x):
            return self.acts[0](x) + self.acts[0](-x)

    gm = specfx.trace(Twice(), (torch.randn(3),))
    assert [name for name, _ in gm.named_children()] == ["_specfx_module0"]
    x = torch.randn(5)
    assert torch.equal(gm(x), Twice()(x))


def test_a_layer_built_in_forward_with_weights_is_refused():
    """Eager initializes new random weights at every call: a graph cannot keep one draw."""

    class Fresh(nn.Module):
        def forward(self, x):
            return nn.Linear(3, 2)(x)

    x = torch.randn(2, 3)
    rng = torch.get_rng_state()
    with pytest.raises(SpecializationError) as info:
        specfx.trace(Fresh(), (x,))
    message = str(info.value)
    assert message.startswith("a parameter (torch.nn.Parameter) is made inside the traced code, e.g. by a "
                              "layer built in forward (`nn.Linear(4, 3)(x)`): eager makes new, randomly "
                              "initialized weights on every call")
    assert "Fix: build the layer once in __init__ (`self.layer = nn.Linear(4, 3)`)" in message
    assert "test_foreign_modules.py" in message and "return nn.Linear(3, 2)(x)" in message
    assert torch.equal(torch.get_rng_state(), rng)  # the trace's draws did not move the user's RNG


def test_a_user_module_built_in_forward_holding_a_fresh_buffer_is_refused():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Module()
            self.inner.register_buffer("scale", torch.full((3,), 2.0))
            self.inner.forward = lambda x: x * self.inner.scale

        def forward(self, x):
            return self.inner(x)

    class Outer(nn.Module):
        def forward(self, x):
            return Block()(x)

    with pytest.raises(SpecializationError, match=r"^Block\(\.\.\.\) is built inside the traced code and "
                                                 r"called: its parameters or buffers \(its Module\)"):
        specfx.trace(Outer(), (torch.randn(2, 3),))


def test_without_examples_torch_fx_answer_is_kept():
    class Soft(nn.Module):
        def forward(self, x):
            return nn.Softmax(dim=-1)(x)

    with pytest.raises(NameError, match="module is not installed as a submodule"):
        specfx.trace(Soft())


class TestFunctionalCall:
    """`torch.func.functional_call(module, tensors, args)` with traced values is one graph call on
    the module (by its name in the graph): the graph swaps in the run-time tensors, as eager does."""

    @pytest.mark.parametrize("owned", [False, True, "held"])
    def test_a_params_dict_input_gives_eager_outputs_and_gradients(self, owned):
        from .oracles import assert_same_gradients

        torch.manual_seed(0)
        shared = nn.Linear(3, 3)

        class Functional(nn.Module):
            def __init__(self):
                super().__init__()
                if owned is True:
                    self.lin = shared

            def forward(self, x, params):
                call = held_functional_call if owned == "held" else torch.func.functional_call
                return call(shared, params, (x,)).relu() * 2

        model = Functional()

        def tensors():
            return {"weight": torch.randn(3, 3, requires_grad=True), "bias": torch.randn(3, requires_grad=True)}

        gm = specfx.trace(model, (torch.randn(2, 3), tensors()))
        assert "functional_call" in gm.code
        assert ("self.lin" in gm.code) == (owned is True)
        for _ in range(2):
            assert_same_gradients(model, gm, (torch.randn(4, 3), tensors()), model)
        assert [name for name, _ in model.named_children()] == (["lin"] if owned is True else [])
