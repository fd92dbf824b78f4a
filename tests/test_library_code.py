"""Patterns libraries use that plain torch.fx cannot trace: decorated forwards, questions about
the tracer, tensor factories with traced sizes, TorchScript helpers, outputs no graph can hold,
and errors raised inside torch's own containers. Each is checked on a small model of our own."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.fx
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError


def passes_through(forward):
    """A decorator as transformers writes them: ``wrapper(self, *args, **kwargs)`` that adds a keyword."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        kwargs["scale"] = kwargs.get("scale") if kwargs.get("scale") is not None else self.default_scale
        return forward(self, *args, **kwargs)

    return wrapper


class Decorated(nn.Module):
    default_scale = 3.0

    @passes_through
    def forward(self, x, mask=None, scale=None, **kwargs):
        y = x * scale
        return y if mask is None else y * mask


def renamed_keyword(forward):
    """As transformers' deprecate_kwarg: the old name is moved to the new one, unless the call
    gives both (then the new one wins and the old is dropped)."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if "past" in kwargs:
            old = kwargs.pop("past")
            kwargs.setdefault("cache", old)
        return forward(self, *args, **kwargs)

    return wrapper


class RenamedKeyword(nn.Module):
    @renamed_keyword
    def forward(self, x, cache=None, flag=False, **kwargs):
        return x if cache is None else x + cache


class TestDecoratedForward:
    def test_wrapper_runs_with_the_real_signature(self):
        """A functools.wraps forward is traced through its wrapper: the wrapper's keyword reaches the code."""
        model = Decorated()
        x, mask = torch.randn(2, 3), torch.ones(2, 3)
        gm = specfx.trace(model, example_kwargs={"x": x, "mask": mask})
        other = torch.randn(4, 5)
        torch.testing.assert_close(gm(x=other, mask=torch.zeros(4, 5)), model(other, mask=torch.zeros(4, 5)))

    def test_missing_optional_input_is_guarded(self):
        """An input left out of the examples is None in the traced code, and giving it fails a guard."""
        gm = specfx.trace(Decorated(), example_kwargs={"x": torch.randn(2, 3)})
        torch.testing.assert_close(gm(torch.ones(2)), torch.full((2,), 3.0))
        with pytest.raises(GuardError):
            gm(torch.ones(2), mask=torch.ones(2))

    def test_parameters_the_examples_leave_out_are_left_out_of_the_call(self):
        """The graph calls forward with what the examples give, as eager is called: a wrapper that
        reads **kwargs sees no `cache=None` the user never passed (it made the old name lose,
        and the graph ignored the input eager uses)."""
        model = RenamedKeyword()
        x, past = torch.randn(2, 3), torch.randn(2, 3)
        gm = specfx.trace(model, example_kwargs={"x": x, "past": past})
        other, other_past = torch.randn(4, 3), torch.randn(4, 3)
        torch.testing.assert_close(gm(x=other, past=other_past), model(other, past=other_past))
        torch.testing.assert_close(gm(x=x, past=past), x + past)
        with pytest.raises(GuardError):  # the left-out `flag` is still guarded at its default
            gm(x=other, past=other_past, flag=True)

    def test_symbolic_trace_without_examples(self):
        """Without examples the decorated root traces as torch.fx traces an undecorated one: every
        parameter is an input of the graph."""
        gm = specfx.trace(Decorated(), concrete_args={"mask": None})
        torch.testing.assert_close(gm(torch.ones(2), scale=2.0), torch.full((2,), 2.0))


class TestQuestionsAboutTheTracer:
    def test_isinstance_proxy_is_true_while_tracing(self):
        """`isinstance(x, torch.fx.Proxy)` answers truthfully, so libraries keep their traceable path
        instead of a data-dependent shortcut."""

        def f(x, mask):
            if not isinstance(mask, torch.fx.Proxy) and bool(torch.all(mask == 1)):
                return x  # an eager-only shortcut: a decision on the mask's data
            return x * mask

        gm = specfx.trace(f, (torch.ones(3), torch.ones(3)))
        assert not gm.specializations
        torch.testing.assert_close(gm(torch.ones(3), torch.tensor([1.0, 0.0, 1.0])), torch.tensor([1.0, 0.0, 1.0]))

    def test_isinstance_tensor_still_answers_as_the_value(self):
        """A question about the value (`isinstance(x, torch.Tensor)`) is still answered as the value."""

        def f(x):
            return x + 1 if isinstance(x, torch.Tensor) else x

        assert torch.equal(specfx.trace(f, torch.zeros(2))(torch.zeros(3)), torch.ones(3))


class TestFactoriesWithTracedSizes:
    def test_ones_and_tensor_of_sizes_stay_symbolic(self):
        """torch.ones(b, s) and torch.tensor(x.size(-1)) need no SHAPES and follow the input's sizes."""

        def f(x):
            batch, length = x.shape[0], x.shape[1]
            scale = torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float))
            return x * torch.ones(batch, length) / scale

        gm = specfx.trace(f, torch.randn(2, 4))
        assert not gm.specializations
        other = torch.randn(3, 9)
        torch.testing.assert_close(gm(other), f(other))

    def test_factories_are_restored(self):
        """After a trace torch.ones is torch's own again."""
        ones = torch.ones
        specfx.trace(lambda x: torch.ones(x.shape[0]) + x, torch.randn(2))
        assert torch.ones is ones


@torch.jit.script
def scaled(x: torch.Tensor, factor: int) -> torch.Tensor:
    return x * torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float) * factor)


class UsesScript(nn.Module):
    def forward(self, x):
        return scaled(x, 2) + 1


class TestTorchScriptHelpers:
    def test_script_function_is_traced_through(self):
        """A @torch.jit.script helper's operations are recorded; the graph follows other sizes."""
        model = UsesScript()
        gm = specfx.trace(model, torch.randn(2, 4))
        other = torch.randn(3, 7)
        torch.testing.assert_close(gm(other), model(other))

    def test_global_state_is_left_alone(self):
        """The helper is a ScriptFunction again after the trace, and torch.fx's wrap table is unchanged."""
        wrapped = dict(torch.fx._symbolic_trace._wrapped_fns_to_patch)
        specfx.trace(UsesScript(), torch.randn(2, 4))
        assert isinstance(scaled, torch.jit.ScriptFunction)
        assert dict(torch.fx._symbolic_trace._wrapped_fns_to_patch) == wrapped
        gm = specfx.trace(nn.Sequential(nn.Linear(4, 2)), torch.randn(1, 4))  # a later trace is unaffected
        assert [n.op for n in gm.graph.nodes].count("call_module") == 1


class Cache:
    """An object no FX graph can return."""


class ReturnsCache(nn.Module):
    def forward(self, x):
        return {"out": x * 2, "cache": Cache()}


class TestOutputs:
    def test_unrepresentable_output_is_named(self):
        """An output torch.fx cannot return is named (its type), with the fix."""
        with pytest.raises(SpecializationError, match=r"forward returns .*, a .*Cache.*\nFix: "):
            specfx.trace(ReturnsCache(), torch.ones(2))

    def test_concrete_arg_is_the_graph_default(self):
        """A concrete_args value is the default of the graph's parameter; another value fails loudly."""

        def f(x, use_cache=None):
            return x if use_cache else -x

        gm = specfx.trace(f, (torch.ones(2),), concrete_args={"use_cache": False})
        assert torch.equal(gm(torch.ones(2)), -torch.ones(2))
        with pytest.raises(specfx.GuardError, match="traced with use_cache=False baked in"):
            gm(torch.ones(2), True)


class Experts(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x, index):
        expert = self.experts[index.max()]  # the user's line
        return expert(x)


class TestErrorLocations:
    def test_module_list_index_points_at_the_user_line(self):
        """Indexing a ModuleList with a traced int reports the model's line, not torch's container.py."""
        with pytest.raises(SpecializationError) as info:
            specfx.trace(Experts(), (torch.randn(2, 4), torch.tensor([0, 2])))
        message = str(info.value)
        assert "container.py" not in message and "self.experts[index.max()]" in message
        assert "Experts.forward" in message
        gm = specfx.trace(Experts(), (torch.randn(2, 4), torch.tensor([0, 2])), policy=Policy(scalars=True))
        with pytest.raises(GuardError):
            gm(torch.randn(2, 4), torch.tensor([0, 1]))
