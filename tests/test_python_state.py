"""Python state outside the model and its inputs: caches are left exactly as they were, changes
to globals, class attributes and closures are put back and refused, warnings are graph calls."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn

import specfx
from specfx import SpecializationError

from .models import line_of

STEP = 0
LOG = []


def count_steps(x):
    global STEP
    STEP += 1
    return x * STEP


def log_sums(x):
    LOG.append(x.sum())
    return x * 2


class Calls:
    seen = 0


def count_calls(x):
    Calls.seen += 1
    return x * Calls.seen


def make_counter():
    n = 0

    def counter(x):
        nonlocal n
        n += 1
        return x + n

    return counter


HELPER_COUNTER = make_counter()


@functools.lru_cache(maxsize=None)
def grid(n):
    return torch.arange(n).float() / n


def add_grid(x):
    return x + grid(x.shape[-1])


class Rotary(nn.Module):
    @functools.lru_cache(maxsize=8)  # noqa: B019 - the pattern being tested
    def angles(self, n, d):
        inverse = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        return torch.outer(torch.arange(n).float(), inverse)

    def forward(self, x):
        return x[..., : x.shape[-1] // 2] * self.angles(x.shape[-2], x.shape[-1]).cos()


def warns(x):
    warnings.warn("careful", UserWarning, stacklevel=2)
    return x * 2


class TestGlobalsAndClosures:
    def test_a_global_counter_is_refused_and_left_as_it_was(self):
        with pytest.raises(SpecializationError, match=rf"(?s)forward changes Python state outside the model and its "
                                                      rf"inputs \(global `STEP` of tests.test_python_state\).*"
                                                      rf"specfx put it back.*Fix: keep such state on the model.*"
                                                      rf"test_python_state.py:{line_of(count_steps, 'STEP += 1')}"):
            specfx.trace(count_steps, (torch.ones(2),))
        assert STEP == 0

    def test_a_global_list_is_refused_and_its_contents_put_back(self):
        with pytest.raises(SpecializationError, match=r"the contents of tests.test_python_state.LOG"):
            specfx.trace(log_sums, (torch.ones(2),))
        assert LOG == []

    def test_a_class_attribute_is_refused_and_put_back(self):
        with pytest.raises(SpecializationError, match=r"tests.test_python_state.Calls.seen"):
            specfx.trace(count_calls, (torch.ones(2),))
        assert Calls.seen == 0

    def test_a_nonlocal_counter_is_refused_and_put_back(self):
        counter = make_counter()
        with pytest.raises(SpecializationError, match=rf"the variable n of make_counter.<locals>.counter's closure"
                                                      rf"(?s:.*)test_python_state.py:"
                                                      rf"{line_of(make_counter, 'n += 1')}"):
            specfx.trace(counter, (torch.ones(2),))
        assert counter.__closure__[0].cell_contents == 0

    def test_a_counter_in_the_closure_of_a_module_level_helper_is_refused_and_put_back(self):
        """forward calls a closure the module holds (`STEPPER = make_counter()`): its `nonlocal`
        counter is Python state too (found by the promise fuzzer: the trace advanced it)."""

        def uses_helper(x):
            return HELPER_COUNTER(x)

        with pytest.raises(SpecializationError, match=r"the variable n of make_counter.<locals>.counter's closure"):
            specfx.trace(uses_helper, (torch.ones(2),))
        assert HELPER_COUNTER.__closure__[0].cell_contents == 0


class TestCaches:
    def test_a_cached_function_is_called_around_its_cache(self):
        """No proxy enters the cache (eager would get it back), the cache is as it was, and the graph
        computes the cached function's value for each input."""
        grid.cache_clear()
        grid(5)  # an entry the user's eager run made
        before = grid.cache_info()
        gm = specfx.trace(add_grid, (torch.ones(2, 5),))
        assert grid.cache_info() == before
        assert type(grid(7)) is torch.Tensor
        assert torch.equal(gm(torch.ones(3, 5)), add_grid(torch.ones(3, 5)))
        assert torch.equal(gm(torch.ones(3, 9)), add_grid(torch.ones(3, 9)))  # (the size stays symbolic)

    def test_a_cached_method(self):
        model = Rotary()
        Rotary.angles.cache_clear()
        gm = specfx.trace(model, (torch.ones(1, 4, 6),))
        assert Rotary.angles.cache_info().currsize == 0
        assert type(model(torch.ones(1, 4, 6))) is torch.Tensor
        assert torch.equal(gm(torch.ones(2, 4, 6)), model(torch.ones(2, 4, 6)))


class TestWarnings:
    def test_the_graph_warns_on_every_call_and_the_trace_does_not(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gm = specfx.trace(warns, (torch.ones(2),))
            assert caught == []
            gm(torch.ones(2))
            gm(torch.ones(2))
        assert [str(w.message) for w in caught] == ["careful", "careful"]
        assert all(w.category is UserWarning for w in caught)

    def test_an_error_filter_raises_as_in_eager(self):
        gm = specfx.trace(warns, (torch.ones(2),))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="careful"):
                warns(torch.ones(2))
            with pytest.raises(UserWarning, match="careful"):
                gm(torch.ones(2))
