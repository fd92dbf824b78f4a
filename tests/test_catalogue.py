"""A catalogue of awkward inputs and models: each gets a clear, typed answer."""

from __future__ import annotations

import dataclasses
import traceback

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError

from .models import line_of


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    extra: list


class Raises(nn.Module):
    def forward(self, x):
        y = x * 2
        return y @ torch.ones(5, 5)  # shapes do not match the (3, 4) example


class TestModelErrors:
    def test_user_exception_surfaces_with_user_traceback(self):
        """An op failing on the example raises the op's own error from the user's line."""
        with pytest.raises(RuntimeError, match="cannot be multiplied") as caught:
            specfx.trace(Raises(), torch.ones(3, 4))
        frames = traceback.extract_tb(caught.value.__traceback__)
        line = line_of(Raises.forward, "torch.ones(5, 5)")
        assert any(f.filename.endswith("test_catalogue.py") and f.lineno == line for f in frames)
        assert any("specfx computed the example value" in note for note in getattr(caught.value, "__notes__", []))

    def test_user_raise_inside_forward(self):
        """A ValueError the model raises itself reaches the caller unchanged."""

        def f(x):
            raise ValueError("bad config")

        with pytest.raises(ValueError, match="bad config"):
            specfx.trace(f, torch.ones(1))

    def test_attribute_error_names_traced_value(self):
        """A missing tensor attribute is an AttributeError, as in eager."""

        def f(x):
            return x.no_such_thing

        with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'no_such_thing'"):
            specfx.trace(f, torch.ones(1))

    def test_hasattr_answers_truly(self):
        """hasattr()/getattr(default) on traced values answer as the value does (FX always says yes)."""

        def f(x):
            return x + 1 if not hasattr(x, "no_such_thing") else x

        assert "add" in specfx.trace(f, torch.ones(1)).code


class TestOutputs:
    def test_dataclass_output(self):
        """A dataclass output is rebuilt with traced fields."""

        def f(x):
            return Output(logits=x * 2, extra=[x + 1, {"k": x - 1}])

        gm = specfx.trace(f, torch.ones(2))
        out = gm(torch.full((2,), 3.0))
        assert isinstance(out, Output) and torch.equal(out.logits, torch.full((2,), 6.0))
        assert torch.equal(out.extra[1]["k"], torch.full((2,), 2.0))

    def test_constant_and_none_outputs(self):
        """Outputs mixing tensors, None and Python constants come back as in eager."""

        def f(x):
            return x, None, 3, "tag"

        assert specfx.trace(f, torch.ones(1))(torch.zeros(1))[1:] == (None, 3, "tag")


class TestNonTensorInputs:
    def test_int_input_stays_an_input(self):
        """An int input is a placeholder: arithmetic with it stays in the graph."""

        def f(x, n):
            return x * n

        gm = specfx.trace(f, (torch.ones(2), 3))
        assert torch.equal(gm(torch.ones(2), 5), torch.full((2,), 5.0))

    def test_int_input_in_range_needs_a_flag(self):
        """range(n) of an int input needs a value: refused with the fixes, allowed under SCALARS."""

        def f(x, n):
            for _ in range(n):
                x = x * 2
            return x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f, (torch.ones(2), 3))
        assert "concrete_args={'n': 3}" in str(caught.value) and "Policy(scalars=True)" in str(caught.value)
        gm = specfx.trace(f, (torch.ones(2), 3), policy=Policy(scalars=True))
        assert torch.equal(gm(torch.ones(2), 3), torch.full((2,), 8.0))
        with pytest.raises(GuardError):
            gm(torch.ones(2), 4)

    def test_list_of_tensors_input(self):
        """A list of tensors is one input, indexable and iterable under ITER_LEN."""

        def f(features):
            return sum(f.mean() for f in features) + features[0].sum()

        feats = [torch.ones(2), torch.ones(3)]
        gm = specfx.trace(f, (feats,), policy=Policy(iter=True))
        torch.testing.assert_close(gm([torch.ones(4), torch.zeros(1)]), f([torch.ones(4), torch.zeros(1)]))
        with pytest.raises(GuardError):
            gm([torch.ones(2)])

    def test_bool_config_input(self):
        """A bool input in an `if` is decided under BOOL and guarded."""

        def f(x, flag):
            return x + 1 if flag else x - 1

        gm = specfx.trace(f, (torch.ones(1), True), policy=Policy(bool=True))
        assert torch.equal(gm(torch.ones(1), True), torch.full((1,), 2.0))
        with pytest.raises(GuardError):
            gm(torch.ones(1), False)

    def test_concrete_args_bake_config(self):
        """concrete_args bakes a config input in, as in torch.fx, with FX's own check."""

        def f(x, flag):
            return x + 1 if flag else x - 1

        gm = specfx.trace(f, (torch.ones(1),), concrete_args={"flag": True})
        assert torch.equal(gm(torch.ones(1), True), torch.full((1,), 2.0))


class TestDunders:
    def test_hash_is_identity_as_in_fx(self):
        """Traced values hash by identity (FX behaviour), so they can key dicts."""

        def f(x):
            cache = {x: 1}
            return x * cache[x]

        assert torch.equal(specfx.trace(f, torch.ones(2))(torch.ones(2)), torch.ones(2))

    def test_contains_without_bool_is_refused(self):
        """`in` on a traced value is a BOOL decision: refused without BOOL, naming the line."""

        def f(x):
            return x if 1.0 in x else -x

        with pytest.raises(SpecializationError, match="BOOL"):
            specfx.trace(f, (torch.ones(1),))

    def test_setitem_without_examples(self):
        """Item assignment records operator.setitem even without example inputs."""

        def f(x):
            y = x.clone()
            y[0] = 1.0
            return y

        gm = specfx.trace(f)
        assert torch.equal(gm(torch.zeros(2)), torch.tensor([1.0, 0.0]))

    def test_float_of_data_needs_scalars(self):
        """float() of tensor data is SCALARS, with the fix in the message."""

        def f(x):
            return x * float(x.mean())

        with pytest.raises(SpecializationError, match=r"float\(\) of `x.mean\(\)`.*SCALARS"):
            specfx.trace(f, torch.ones(2))

    def test_iterating_a_zero_dim_tensor_fails_as_in_eager(self):
        """Iterating a 0-d tensor raises the TypeError eager raises."""

        def f(x):
            return [v for v in x.sum()]

        with pytest.raises(TypeError, match="0-d tensor"):
            specfx.trace(f, torch.ones(2), policy=Policy(iter=True))


class TestScriptedSubmodules:
    def test_scripted_submodule_is_a_call(self):
        """A torch.jit.script submodule is recorded as a call (as torch.fx does) and state keeping copes with it."""

        class Scripted(nn.Module):
            def forward(self, x):
                return torch.relu(x)

        class Holder(nn.Module):
            def __init__(self):
                super().__init__()
                self.s = torch.jit.script(Scripted())

            def forward(self, x):
                return self.s(x) + 1

        for examples in (None, (torch.randn(3),)):
            gm = specfx.trace(Holder(), examples)
            x = torch.randn(4)
            assert torch.equal(gm(x), torch.relu(x) + 1)
