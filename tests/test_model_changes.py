"""The model after the trace, and the module machinery around a call.

The rule: a graph holds the tensors and submodules it traced and has inlined the hooks of the
modules it traced through; when the model it was traced from changes so that it would no
longer compute what the model computes (a parameter, buffer or tensor attribute replaced, a
submodule swapped, a hook added or removed on a module traced through, a process-wide hook
registered), the graph raises GuardError at entry naming what changed. What the graph follows
as eager does is not an error: values written into the same tensors (an optimizer step,
``load_state_dict`` without ``assign``), and the parameters and hooks of the leaf modules it
calls (the model's own objects). Also: the mode a trace read (``self.training``) is checked
on the graph module; lazy modules, ``__call__`` overrides and process-wide hooks are refused
before tracing, naming the fix."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.modules.module as module_hooks
from torch import nn

import specfx
from specfx import GuardError, SpecializationError

from .models import line_of


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((3,), 1.5))
        self.lin = nn.Linear(3, 3)
        self.register_buffer("shift", torch.full((3,), 0.25))
        self.plain = torch.full((3,), 2.0)

    def forward(self, x):
        return self.lin(x) * self.scale + self.shift + self.plain


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.w = nn.Parameter(torch.ones(3))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.block(x) + self.w)


def doubled(module, inputs, output):
    return output * 2


CHANGES = {  # what changed -> how the message names it
    "parameter replaced": (lambda m: setattr(m.block, "scale", nn.Parameter(torch.ones(3))),
                           r"`block\.scale` is a parameter other than the traced one"),
    "root parameter replaced": (lambda m: setattr(m, "w", nn.Parameter(torch.zeros(3))),
                                r"`w` is a parameter other than the traced one"),
    "buffer replaced": (lambda m: setattr(m.block, "shift", torch.zeros(3)),
                        r"`block\.shift` is a tensor other than the traced one"),
    "tensor attribute replaced": (lambda m: setattr(m.block, "plain", torch.zeros(3)),
                                  r"`block\.plain` is a tensor other than the traced one"),
    "load_state_dict assign": (
        lambda m: m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()}, assign=True),
        r"`block\.scale` is a parameter other than the traced one"),
    "leaf swapped": (lambda m: setattr(m, "act", nn.Tanh()), r"`act` is a module \(Tanh\) other than the traced one"),
    "traced-through module swapped": (lambda m: setattr(m, "block", Block()),
                                      r"`block` is a module \(Block\) other than the traced one"),
    "hook added to a traced-through module": (lambda m: m.block.register_forward_hook(doubled),
                                              r"a forward hook added to `block`"),
    "pre-hook added to the root": (lambda m: m.register_forward_pre_hook(lambda mod, args: (args[0] * 3,)),
                                   r"a forward pre-hook added to `the model`"),
}


@pytest.fixture
def no_global_hooks():
    yield
    for name in ("_global_forward_hooks", "_global_forward_pre_hooks"):
        getattr(module_hooks, name).clear()


class TestTheModelChangedAfterTheTrace:
    @pytest.mark.parametrize("change", CHANGES, ids=str)
    def test_the_graph_raises_naming_what_changed(self, change):
        model = Net()
        x = torch.randn(2, 3)
        gm = specfx.trace(model, (x,))
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
        apply, named = CHANGES[change]
        apply(model)
        with pytest.raises(GuardError, match=rf"(?s)the model changed since the graph was traced \(.*{named}.*"
                                             r"Fix: trace the model again.*copy\.deepcopy\(gm\)"):
            gm(x)
        again = specfx.trace(model, (x,))  # the fix: the new graph computes what the model computes now
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)

    def test_a_hook_removed_from_a_traced_through_module(self):
        model = Net()
        handle = model.block.register_forward_hook(doubled)
        x = torch.randn(2, 3)
        gm = specfx.trace(model, (x,))
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)  # (the hook is traced in)
        handle.remove()
        with pytest.raises(GuardError, match=r"a forward hook removed from `block`"):
            gm(x)

    def test_a_process_wide_hook_registered_after_the_trace(self, no_global_hooks):
        model = Net()
        x = torch.randn(2, 3)
        gm = specfx.trace(model, (x,))
        module_hooks.register_module_forward_hook(lambda mod, i, o: o + 1 if isinstance(mod, Block) else None)
        with pytest.raises(GuardError, match=r"a process-wide forward hook registered"):
            gm(x)

    @pytest.mark.parametrize("change", ["optimizer step", "load_state_dict", "leaf parameter", "leaf hook"])
    def test_what_the_graph_follows_is_no_error(self, change):
        """Values written into the traced tensors, and a leaf module's own parameters and hooks
        (the graph calls the model's leaf itself), give eager's answer."""
        model = Net()
        x = torch.randn(2, 3)
        gm = specfx.trace(model, (x,))
        if change == "optimizer step":
            model(x).sum().backward()
            torch.optim.SGD(model.parameters(), lr=0.5).step()
        elif change == "load_state_dict":
            model.load_state_dict({k: v * 3 for k, v in model.state_dict().items()})
        elif change == "leaf parameter":
            model.block.lin.weight = nn.Parameter(torch.eye(3))
        else:
            model.block.lin.register_forward_hook(doubled)
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)

    def test_copies_hold_their_own_tensors_and_watch_nothing(self):
        """A deepcopy or a saved graph keeps the traced tensors as its own: the model's changes
        are no concern of it; a re-trace by specfx shares the model's tensors and keeps watching."""
        model = Net()
        x = torch.randn(2, 3)
        gm = specfx.trace(model, (x,))
        expected = gm(x)
        copied = copy.deepcopy(gm)
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        retraced = specfx.trace(gm, (x,))
        model.w = nn.Parameter(torch.zeros(3))
        torch.testing.assert_close(copied(x), expected, rtol=0, atol=0)
        torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)
        with pytest.raises(GuardError, match=r"`w` is a parameter other than the traced one"):
            retraced(x)


def test_a_specializer_traces_the_changed_model_again():
    """A Specializer treats the entry check like any guard: a variant of the old model fails it,
    and the call traces the model as it is now."""
    model, x = Net(), torch.randn(2, 3)
    spec = specfx.Specializer(model)
    torch.testing.assert_close(spec(x), model(x), rtol=0, atol=0)
    model.w = nn.Parameter(torch.zeros(3))
    torch.testing.assert_close(spec(x), model(x), rtol=0, atol=0)
    assert len(spec.variants) == 2


class Mode(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return nn.functional.dropout(x, 0.5, self.training) + self.drop(x)


class LeafModeOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) * 2


class TestMode:
    @pytest.mark.parametrize("traced_training", [False, True])
    @pytest.mark.parametrize("tool", ["graph", "deepcopy", "save_load", "symbolic_trace", "specfx_trace"])
    def test_the_other_mode_raises_naming_it(self, traced_training, tool):
        model = Mode().train(traced_training)
        x = torch.randn(4, 3)
        with pytest.warns(UserWarning) if traced_training else _nothing():  # (specfx warns of a train-mode trace)
            gm = specfx.trace(model, (x,))
        if tool == "deepcopy":
            gm = copy.deepcopy(gm)
        elif tool == "save_load":
            buffer = io.BytesIO()
            torch.save(gm, buffer)
            buffer.seek(0)
            gm = torch.load(buffer, weights_only=False)
        elif tool == "symbolic_trace":
            gm = torch.fx.symbolic_trace(gm)
        elif tool == "specfx_trace":
            gm = specfx.trace(gm, (x,))
        gm.train(not traced_training)
        traced, now = ("training", "eval") if traced_training else ("eval", "training")
        where = rf"test_model_changes.py:{line_of(Mode, 'self.training')}"
        with pytest.raises(GuardError, match=rf"(?s)traced in {traced} mode .* now in {now} mode.*"
                                             rf"Fix: call gm\.{'train' if traced_training else 'eval'}\(\).*{where}"):
            gm(x)
        gm.train(traced_training)
        if not traced_training:
            torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)

    def test_a_mode_only_leaves_read_is_followed(self):
        """No traced code reads `self.training`: the graph's leaves follow gm.train() as the
        model's follow model.train()."""
        model = LeafModeOnly().eval()
        x = torch.randn(4, 3)
        gm = specfx.trace(model, (x,))
        gm.train(), model.train()
        torch.manual_seed(0)
        graph_out = gm(x)
        torch.manual_seed(0)
        torch.testing.assert_close(graph_out, model(x), rtol=0, atol=0)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class LazyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.LazyLinear(4)

    def forward(self, x):
        return self.proj(x)


class OverridesCall(Net):
    def __call__(self, x):
        return super().__call__(x * 3)


class Calls(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model(*args)


class TestModuleMachinery:
    def test_an_uninitialized_lazy_module_is_refused_and_left_lazy(self):
        model = LazyNet()
        with pytest.raises(SpecializationError, match=r"(?s)lazy modules whose parameters are not made yet \(proj\).*"
                                                      r"Fix: run one forward on an example first"):
            specfx.trace(model, (torch.randn(2, 3),))
        assert isinstance(model.proj.weight, nn.parameter.UninitializedParameter)
        x = torch.randn(2, 3)
        model(x)  # the fix
        gm = specfx.trace(model, (x,))
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)

    def test_a_root_overriding_call_is_refused_naming_the_line(self):
        where = rf"test_model_changes.py:{line_of(OverridesCall, 'def __call__')}"
        with pytest.raises(SpecializationError, match=rf"(?s)`OverridesCall` overrides `__call__`.*Fix: move.*{where}"):
            specfx.trace(OverridesCall(), (torch.randn(2, 3),))
        model, x = OverridesCall(), torch.randn(2, 3)
        gm = specfx.trace(Calls(model), (x,))  # the fix: a module calling it traces through __call__
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)

    @pytest.mark.parametrize("register", [module_hooks.register_module_forward_hook,
                                          module_hooks.register_module_forward_pre_hook])
    def test_process_wide_hooks_are_refused(self, register, no_global_hooks):
        model = Net()
        register(lambda mod, *rest: None)
        with pytest.raises(SpecializationError, match=r"(?s)process-wide module hooks are registered.*"
                                                      r"Fix: remove them while tracing"):
            specfx.trace(model, (torch.randn(2, 3),))

    def test_the_fix_for_process_wide_hooks(self):
        """A hook on the module it is meant for is traced (on a module traced through) or run
        (on a leaf), as eager does."""
        model, x = Net(), torch.randn(2, 3)
        model.block.register_forward_hook(doubled)
        model.register_forward_hook(lambda mod, i, o: o - 1)
        model.block.lin.register_forward_pre_hook(lambda mod, args: (args[0] * 5,))
        gm = specfx.trace(model, (x,))
        torch.testing.assert_close(gm(x), model(x), rtol=0, atol=0)
