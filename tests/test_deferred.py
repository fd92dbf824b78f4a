"""Values computed in batches when first read (``specfx/_capture/deferred.py``) are the values,
decisions and graphs of computing each at once; where batching cannot keep that
promise the trace computes values one by one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy, SpecializationError
from specfx._capture.deferred import DeferredValues
from tools.bench.models import BertLike, Chain, ResidualNormBlocks, SmallResNet, sequential_mlp_blocks


def _one_by_one(monkeypatch):
    """From now on in the test, every value is computed the moment its node is recorded."""
    monkeypatch.setattr(DeferredValues, "deferrable", lambda self, kind, target, args, leaf: False)


class CountsPending(specfx.SpecTracer):
    """Remembers the most values that were pending at once."""

    most_pending = 0

    def create_proxy(self, *args, **kwargs):
        proxy = super().create_proxy(*args, **kwargs)
        CountsPending.most_pending = max(CountsPending.most_pending, len(self.pending_values))
        return proxy


def _summary(gm):
    metas = [(n.name, n.meta.get("tensor_meta"), n.meta.get("type")) for n in gm.graph.nodes]
    return gm.code, [(s.kind, s.value, s.guard_description) for s in gm.specializations], metas


MODELS = {
    "residual-norm": lambda: (ResidualNormBlocks(6, 8).eval(), (torch.randn(2, 8),)),
    "mlp": lambda: (sequential_mlp_blocks(3, 8).eval(), (torch.randn(2, 8),)),
    "resnet": lambda: (SmallResNet().eval(), (torch.randn(1, 3, 16, 16),)),
    "bert": lambda: (BertLike(layers=2, hidden=16, heads=2, intermediate=32, vocab=50).eval(),
                     (torch.randint(0, 50, (2, 5)), torch.ones(2, 5))),
    "chain": lambda: (Chain(20), (torch.randn(8),)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_batched_values_give_the_graph_of_values_computed_one_by_one(name, monkeypatch):
    model, args = MODELS[name]()
    torch.manual_seed(0)
    batched = _summary(specfx.trace(model, args, policy=Policy(specfx.Specialize.ALL)))
    _one_by_one(monkeypatch)
    torch.manual_seed(0)
    assert _summary(specfx.trace(model, args, policy=Policy(specfx.Specialize.ALL))) == batched


def test_ops_of_torch_wait_until_a_value_is_read():
    """A stack of torch's modules computes its values in one batch, at the end."""
    CountsPending.most_pending = 0
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(5)], nn.ReLU())
    gm = specfx.trace(model, torch.randn(2, 4), tracer_class=CountsPending)
    assert CountsPending.most_pending == 6
    x = torch.randn(3, 4)
    assert torch.equal(gm(x), model(x))


def test_a_value_read_after_a_pending_write_sees_the_write():
    """`y.item()` reads a value that an in-place op recorded before it changes."""

    def f(y, z):
        y.add_(z)
        return y * 2 if y.item() > 5 else y

    gm = specfx.trace(f, (torch.tensor(2.0), torch.tensor(4.0)), policy=Policy(scalars=True))
    assert [s.value for s in gm.specializations] == [6.0]


def test_each_value_is_computed_in_the_grad_mode_of_its_op():
    class NoGradBranch(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)

        def forward(self, x):
            with torch.no_grad():
                frozen = self.linear(x)
            live = self.linear(x)
            return frozen * 2 if live.requires_grad and not frozen.requires_grad else frozen

    gm = specfx.trace(NoGradBranch(), torch.randn(3, 2), policy=Policy(bool=True))
    assert sorted(s.value for s in gm.specializations if "requires_grad" in s.guard_description) == [False, True]
    assert torch.is_grad_enabled()


class _ReturnsNone(nn.Module):
    """A module of torch's own (as far as specfx can tell) whose forward returns None."""

    def forward(self, x):
        return None


_ReturnsNone.__module__ = "torch.nn.modules.fictional"


def test_a_torch_leaf_that_returns_none_is_none_to_the_code():
    class UsesOptional(nn.Module):
        def __init__(self):
            super().__init__()
            self.maybe = _ReturnsNone()

        def forward(self, x):
            extra = self.maybe(x)
            return x + 1 if extra is None else x + extra

    model = UsesOptional()
    gm = specfx.trace(model, torch.ones(2))
    assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))


def _fails_on_mismatch(x):
    y = torch.cat([x, x.t()])  # fails when x is not square
    return y + 1


def _catches_failure(x):
    try:
        y = torch.cat([x, x.t()])
    except RuntimeError:
        y = x
    return y + 1


@pytest.mark.parametrize(("function", "error", "match"), [
    # eager's own error, as eager raises it
    (_fails_on_mismatch, RuntimeError, r"^Sizes of tensors must match except in dimension 0"),
    # the model catches the op's error: the trace would keep the fallback, so it refuses
    (_catches_failure, SpecializationError, r"raised RuntimeError \('Sizes of tensors must match.*"
                                            r"the model code caught it"),
], ids=["uncaught", "caught"])
def test_a_failing_op_raises_what_computing_one_by_one_raises(function, error, match, monkeypatch):
    with pytest.raises(error, match=match) as batched:
        specfx.trace(function, torch.ones(2, 3))
    _one_by_one(monkeypatch)
    with pytest.raises(error, match=match) as one_by_one:
        specfx.trace(function, torch.ones(2, 3))
    assert type(batched.value) is type(one_by_one.value) is error
    assert str(batched.value) == str(one_by_one.value)
    if function is _catches_failure:
        assert "y = torch.cat([x, x.t()])" in str(batched.value)


def test_a_user_leaf_runs_when_called():
    """A user-defined leaf may read Python state that forward changes after the call: its
    value is computed at the call, as in eager (not in a later batch)."""

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 1.0

        def forward(self, x):
            return x * self.k

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def forward(self, x):
            first = torch.relu(self.scale(x))
            self.scale.k = 3.0
            second = self.scale(x)
            self.scale.k = 1.0
            return x if first.sum() < second.sum() else -x

    x = torch.ones(2)
    gm = specfx.trace(Model(), x, policy=Policy(bool=True), leaf_modules=[Scale])
    assert [s.value for s in gm.specializations] == [True]


def test_a_torch_leaf_under_a_forward_hook_runs_when_called():
    """A forward hook is user code: it may read Python state forward changes after the call,
    so the leaf's value is computed at the call (not in a later batch). (A process-wide hook is
    refused: tests/test_model_changes.py.)"""
    state = {"k": 1.0}

    def scale(module, inputs, output):
        return output * state["k"]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()

        def forward(self, x):
            first = self.act(x)
            state["k"] = 3.0
            second = self.act(x)
            state["k"] = 1.0
            return x if first.sum() < second.sum() else -x

    model = Model()
    model.act.register_forward_hook(scale)
    gm = specfx.trace(model, torch.ones(2), policy=Policy(bool=True))
    assert [s.value for s in gm.specializations] == [True]
