"""State forward writes on the model: the graph performs the same writes (the graph module
after every call holds what the eager model holds), or the trace refuses, naming what forward
changes and where. In-place tensor writes are graph nodes; a traced tensor bound to an
attribute or a buffer is bound by the graph on every call; anything else (a Python counter,
a new buffer, parameter or submodule, the model's lists, mode flags) is put back and refused."""

from __future__ import annotations

import copy
import io
import re

import pytest
import torch
from torch import nn

import specfx
from specfx import SpecializationError

from .models import line_of
from .oracles import assert_same_gradients, assert_same_model_state


class MovingAverage(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(3))

    def forward(self, x):
        self.avg = 0.9 * self.avg + 0.1 * x.mean(0)
        return x - self.avg


class KeepsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        self.last = x * 2
        return x + 1


class ReturnsPrevious(nn.Module):
    """The old tensor is the output, the new one the state: identities must not be mixed."""

    def __init__(self):
        super().__init__()
        self.previous = torch.zeros(2, 3)

    def forward(self, x):
        out = self.previous
        self.previous = x
        return out


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("hidden", torch.zeros(1, 3))

    def forward(self, x):
        self.hidden = torch.tanh(self.lin(x) + self.hidden)
        return self.hidden * 2


class Stacked(nn.Module):
    """A submodule's forward rebinds its own attributes (the owner is not the root)."""

    def __init__(self):
        super().__init__()
        self.cells = nn.ModuleList([Cell(), Cell()])

    def forward(self, x):
        for cell in self.cells:
            x = cell(x)
        return x


class CachesOnFirstCall(nn.Module):
    """An attribute forward creates (none before the trace)."""

    def forward(self, x):
        self.cache = x.detach() + 1
        return x * 3


STATEFUL = [
    (MovingAverage, ("avg",)),
    (KeepsLast, ("last",)),
    (ReturnsPrevious, ("previous",)),
    (Cell, ("hidden",)),
    (Stacked, ("cells.0.hidden", "cells.1.hidden")),
    (CachesOnFirstCall, ()),
]


def inputs(step):
    return torch.randn(2, 3, generator=torch.Generator().manual_seed(step)) + step


def assert_repeats(graph, eager, written, steps=4, start=0):
    """Outputs and the model state after every call are eager's."""
    for step in range(start, start + steps):
        x = inputs(step)
        torch.testing.assert_close(graph(x), eager(x), rtol=0, atol=0)
        assert_same_model_state(graph, eager, written)


class TestRebindingATracedTensor:
    @pytest.mark.parametrize("model_class, written", STATEFUL, ids=lambda p: getattr(p, "__name__", ""))
    def test_the_graph_binds_it_on_every_call(self, model_class, written):
        torch.manual_seed(0)
        model = model_class()
        eager = copy.deepcopy(model)
        gm = specfx.trace(model, (inputs(100),))
        assert "specfx_assign_attribute(self" in gm.code
        assert_repeats(gm, eager, written)

    @pytest.mark.parametrize("model_class, written", STATEFUL, ids=lambda p: getattr(p, "__name__", ""))
    def test_tracing_leaves_the_model_as_it_was(self, model_class, written):
        model = model_class()
        before = {k: (v, v.clone() if isinstance(v, torch.Tensor) else v) for k, v in vars(model).items()}
        buffers = {k: (v, v.clone()) for k, v in model.named_buffers()}
        specfx.trace(model, (inputs(100),))
        assert vars(model).keys() == before.keys()
        assert all(vars(model)[k] is v for k, (v, _) in before.items())
        assert {k: v for k, v in model.named_buffers()}.keys() == buffers.keys()
        assert all(model.get_buffer(k) is v and torch.equal(v, c) for k, (v, c) in buffers.items())

    def test_the_owner_of_a_submodules_attribute_is_that_submodule(self):
        """A submodule the graph calls through shares its object with the model: the graph
        module's `cells.0.hidden` is what eager's `cells[0].hidden` is after every call."""
        eager, traced = Stacked(), Stacked()
        traced.load_state_dict(eager.state_dict())
        gm = specfx.trace(traced, (inputs(100),))
        assert_repeats(gm, eager, ("cells.0.hidden", "cells.1.hidden"))
        assert torch.equal(gm.get_buffer("cells.1.hidden"), eager.cells[1].hidden)
        assert "cells.0.hidden" in dict(gm.named_buffers())  # (a buffer stays a buffer: state_dict)

    def test_gradients_flow_through_the_bound_state_as_in_eager(self):
        model = Cell()  # (eager and the graph share its parameters; each binds its own `hidden`)
        gm = specfx.trace(model, (inputs(100),))
        for step in range(3):  # (the state carries no autograd graph into the next call: both detach)
            assert_same_gradients(model, gm, (inputs(step).requires_grad_(),), module=model)
            assert_same_model_state(gm, model, ("hidden",))
            model.hidden, gm.hidden = model.hidden.detach(), gm.hidden.detach()

    @pytest.mark.parametrize("tool", ["deepcopy", "save_load", "specfx_trace", "symbolic_trace"])
    def test_copies_saves_and_retraces_keep_the_rebinding(self, tool):
        torch.manual_seed(0)
        model = KeepsLast() if tool == "symbolic_trace" else MovingAverage()
        eager = copy.deepcopy(model)
        gm = specfx.trace(model, (inputs(100),))
        assert_repeats(gm, eager, (), steps=2)
        if tool == "deepcopy":
            other = copy.deepcopy(gm)
        elif tool == "save_load":
            buffer = io.BytesIO()
            torch.save(gm, buffer)
            buffer.seek(0)
            other = torch.load(buffer, weights_only=False)
        elif tool == "specfx_trace":
            other = specfx.trace(gm, (inputs(100),))
        else:  # (torch.fx computes what depends on buffers alone once: a rebinding of the input's value)
            other = torch.fx.symbolic_trace(gm)
        assert "specfx_assign_attribute(self" in other.code
        assert_repeats(other, eager, ("last",) if tool == "symbolic_trace" else ("avg",), steps=3, start=2)

    def test_an_interpreter_run_says_it_cannot_rebind(self):
        gm = specfx.trace(MovingAverage(), (inputs(100),))
        with pytest.raises(RuntimeError, match=r"rebinds `avg` on the GraphModule that runs it.*Interpreter"):
            torch.fx.Interpreter(gm).run(inputs(0))


class PythonCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        return x * self.steps


class RegistersInForward(nn.Module):
    def forward(self, x):
        self.register_buffer("seen", x.detach() * 2)
        return x + 1


class History(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x.sum())
        return x * len(self.history)


class NewParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.scale = nn.Parameter(torch.full((3,), 2.0))
        return x * self.scale


class SwapsSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        self.act = nn.Tanh()
        return self.act(x)


class ConstantTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.marker = None

    def forward(self, x):
        self.marker = torch.ones(1).numpy()  # a new Python object no graph node makes
        return x + 1


class TogglesMode(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        self.drop.eval()
        return self.drop(x)


class TestRefused:
    @pytest.mark.parametrize("model_class, changed, line", [
        (PythonCounter, r"steps \(bound to an int\)", "self.steps += 1"),
        (RegistersInForward, r"seen \(a buffer registered in forward\)", "self.register_buffer"),
        (History, r"history \(changed in place\)", "self.history.append"),
        (SwapsSubmodule, r"act \(a submodule replaced\)", "self.act = nn.Tanh()"),
        (ConstantTensor, r"marker \(bound to a traced ndarray\)", "self.marker = torch.ones"),
        (TogglesMode, r"drop\.training \(bound to a bool\)", "self.drop.eval()"),
    ], ids=lambda p: getattr(p, "__name__", None))
    def test_is_refused_naming_it_and_the_line_and_the_model_left_as_it_was(self, model_class, changed, line):
        model = model_class()
        before = {k: v for k, v in vars(model).items()}
        copies = {k: list(v) for k, v in before.items() if isinstance(v, list)}
        where = rf"test_model_writes.py:{line_of(model_class, line)}: {re.escape(line)}"
        with pytest.raises(SpecializationError, match=rf"(?s)forward changes the model's state \({changed}\).*"
                                                      rf"Fix: keep such state in a tensor buffer.*at .*{where}"):
            specfx.trace(model, (torch.ones(2, 3),))
        assert vars(model).keys() == before.keys() and all(vars(model)[k] is v for k, v in before.items())
        assert all(getattr(model, k) == v for k, v in copies.items())

    def test_a_parameter_made_in_forward_is_refused_by_its_own_rule(self):
        model = NewParameter()
        scale = model.scale
        with pytest.raises(SpecializationError, match=r"(?s)a parameter \(torch.nn.Parameter\) is made inside the "
                                                      rf"traced code.*test_model_writes.py:{line_of(NewParameter, 'full')}"):
            specfx.trace(model, (torch.ones(2, 3),))
        assert model.scale is scale


class InPlaceAverage(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(3))

    def forward(self, x):
        self.avg.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.avg


class TestInPlace:
    def test_in_place_updates_are_repeated_by_the_graph(self):
        """The write oracle on the model: its buffers after every call are eager's (the graph
        writes the tensors it shares with the model)."""
        eager, traced = InPlaceAverage(), InPlaceAverage()
        gm = specfx.trace(traced, (torch.ones(2, 3),))
        assert torch.equal(traced.avg, torch.zeros(3))
        for step in range(3):
            x = inputs(step)
            assert torch.equal(gm(x), eager(x))
            assert torch.equal(traced.avg, eager.avg)
            assert_same_model_state(gm, eager, ("avg",))
