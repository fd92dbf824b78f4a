"""Writes forward makes to its inputs: the graph repeats them (tensors written in place) or the
trace is refused (lists and dicts of the caller, attributes of an input) — never dropped."""

from __future__ import annotations

import types

import pytest
import torch

import specfx
from specfx import SpecializationError

from .oracles import assert_same_writes


def append(x, cache):
    cache.append(x * 2)
    return x + 1


def set_key(x, d):
    d["k"] = x * 2
    return x + 1


def pop(x, xs):
    return x + xs.pop()


def replace_element(x, xs):
    xs[0] = torch.cat([xs[0], x])
    return xs[0].sum(0)


def update_and_delete(x, d):
    d.update(b=x + 1)
    del d["a"]
    return x


def extend_nested(x, nested):
    nested["layers"][0].extend([x, x * 2])
    return x


class TestContainers:
    @pytest.mark.parametrize("f, args, change", [
        (append, (torch.ones(2), [torch.zeros(2)]), r"cache: 1 element\(s\) added \(length 1 -> 2\)"),
        (set_key, (torch.ones(2), {"a": torch.zeros(2)}), r"d: key 'k' added"),
        (pop, (torch.ones(2), [torch.ones(2), torch.ones(2)]), r"xs: 1 element\(s\) removed"),
        (replace_element, (torch.ones(1, 2), [torch.ones(2, 2)]), r"xs: element\(s\) 0 replaced"),
        (update_and_delete, (torch.ones(2), {"a": torch.ones(2)}), r"d: key 'b' added, key 'a' removed"),
        (extend_nested, (torch.ones(2), {"layers": [[]]}), r"nested\['layers'\]\[0\]: 2 element\(s\) added"),
    ])
    def test_a_write_to_a_callers_container_is_refused(self, f, args, change):
        with pytest.raises(SpecializationError, match=rf"(?s)forward writes to the lists or dicts it was given "
                                                      rf"\({change}.*Fix: return the new values.*def {f.__name__}"):
            specfx.trace(f, args)

    def test_keyword_arguments_are_named(self):
        def f(x, past=None):
            past["n"] = x.sum()
            return x

        with pytest.raises(SpecializationError, match=r"past: key 'n' added"):
            specfx.trace(f, (torch.ones(2),), {"past": {}})

    def test_tensors_written_in_place_inside_a_list_are_repeated(self):
        """`xs[0] += x` stores iadd's result back: the same tensor in eager, and the graph writes it."""
        def f(x, xs):
            xs[0] += x
            xs[1].mul_(2)
            return xs[0] * 2

        gm = specfx.trace(f, (torch.ones(2), [torch.ones(2), torch.ones(2)]))
        assert_same_writes(f, gm, (torch.randn(2), [torch.randn(2), torch.randn(2)]))

    def test_a_local_copy_may_be_written(self):
        def f(x, xs):
            xs = list(xs)
            xs.append(x)
            return torch.stack(xs).sum(0)

        gm = specfx.trace(f, (torch.ones(2), [torch.ones(2)]))
        assert_same_writes(f, gm, (torch.randn(2), [torch.randn(2)]))


class TestAttributes:
    def test_data_of_an_input_is_refused(self):
        def f(x, y):
            x.data = y * 2
            return x + 1

        with pytest.raises(SpecializationError, match=r"(?s)`x.data = \.\.\.` assigns an attribute of an input.*"
                                                      r"Fix: write the data in place, `with torch.no_grad\(\): "
                                                      r"x.copy_\(new\)`"):
            specfx.trace(f, (torch.ones(2), torch.ones(2)))

    def test_an_attribute_of_an_input_object_is_refused(self):
        def f(x, state):
            state.h = x * 2
            return x + 1

        with pytest.raises(SpecializationError, match=r"`state.h = \.\.\.` assigns an attribute of an input"):
            specfx.trace(f, (torch.ones(2), types.SimpleNamespace(h=torch.zeros(2))))

    def test_grad_of_a_computed_tensor_is_refused(self):
        def f(x):
            y = x * 2
            y.grad = torch.ones(2)
            return y

        with pytest.raises(SpecializationError, match=r"`y.grad = \.\.\.` assigns an attribute of a tensor"):
            specfx.trace(f, (torch.ones(2),))

    def test_a_python_attribute_of_a_computed_tensor_stays_on_it(self):
        def f(x):
            y = x * 2
            y.scale = 3.0
            return y * y.scale

        gm = specfx.trace(f, (torch.ones(2),))
        assert_same_writes(f, gm, (torch.randn(2),))
