"""Bad input gets a typed error saying what was expected, what was given and the fix;
bound ``forward`` and ``functools.partial`` trace as users expect."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn

import specfx
import specfx._trace.check
from specfx import Policy


def scaled(x, scale, bias=0.0):
    return x * scale + bias


class TestRoots:
    def test_bound_forward_traces_as_the_module(self):
        model = nn.Linear(2, 2)
        gm = specfx.trace(model.forward, (torch.ones(1, 2),))
        assert torch.equal(gm(torch.ones(1, 2)), model(torch.ones(1, 2)))
        assert [n.op for n in gm.graph.nodes].count("get_attr") == 2  # the module's own parameters

    def test_another_bound_method_is_refused_with_the_fix(self):
        class Encoder(nn.Module):
            def encode(self, x):
                return x + 1

            def forward(self, x):
                return self.encode(x)

        with pytest.raises(TypeError, match=r"bound method Encoder\.encode.*wrap the method in a module"):
            specfx.trace(Encoder().encode, (torch.ones(2),))

    def test_partial_traces_the_open_parameters(self):
        gm = specfx.trace(functools.partial(scaled, scale=2.0), (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(gm(torch.ones(2), scale=3.0), torch.full((2,), 3.0))

    def test_partial_of_a_lambda_with_a_tensor_keyword(self):
        gm = specfx.trace(functools.partial(lambda a, b: a * b, b=torch.full((2,), 4.0)), (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 4.0))


class TestWrongInputTypes:
    @pytest.mark.parametrize("given, type_name", [(None, "None"), ([1, 2], r"a list \(\[1, 2\]\)")])
    def test_a_non_tensor_where_a_tensor_was_traced(self, given, type_name):
        gm = specfx.trace(lambda x: x.relu() + x.shape[0], (torch.ones(2),), policy=Policy(shapes=True))
        with pytest.raises(specfx.GuardError, match=rf"x is {type_name}, traced as a Tensor"):
            gm(given)


class TestOptions:
    def test_autowrap_functions_checked_up_front(self):
        with pytest.raises(TypeError, match="autowrap_functions= takes a tuple of functions.*got 1 of type int"):
            specfx.trace(scaled, (torch.ones(2), 2.0), autowrap_functions=[1])

    def test_concrete_args_mismatch_is_a_guard_error(self):
        def f(x, flag):
            return x + 1 if flag else x - 1

        gm = specfx.trace(f, (torch.ones(2),), concrete_args={"flag": True})
        with pytest.raises(specfx.GuardError, match=r"traced with flag=True baked in .*passes flag=False"):
            gm(torch.ones(2), False)

    def test_concrete_none_mismatch_is_a_guard_error(self):
        def g(x, n=None):
            return x if n is None else x * n

        gm = specfx.trace(g, (torch.ones(2),), concrete_args={"n": None})
        with pytest.raises(specfx.GuardError):
            gm(torch.ones(2), 3)


class TestCheckInputsIsExact:
    def test_values_bit_for_bit(self):
        compare = specfx._trace.check.compare_outputs
        one = torch.tensor([1.0])
        assert compare(one, one.clone()) is None
        assert "values differ" in compare(one, torch.nextafter(one, torch.tensor([2.0])))
        assert "values differ" in compare(torch.tensor([0.0]), torch.tensor([-0.0]))
        assert compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None

    def test_a_tolerance_only_when_asked(self):
        one = torch.tensor([1.0])
        assert specfx._trace.check.compare_outputs(one, one + 1e-7, (1e-5, 1e-6)) is None

    def test_dtype_and_requires_grad(self):
        compare = specfx._trace.check.compare_outputs
        assert "shape/dtype" in compare(torch.ones(2), torch.ones(2, dtype=torch.float64))
        assert "requires_grad" in compare(torch.ones(2), torch.ones(2, requires_grad=True))

    def test_aliasing(self):
        x = torch.ones(2)
        problem = specfx._trace.check._compare_aliasing(((x,), {}), x, ((x.clone(),), {}), torch.ones(2))
        assert "shares memory with nothing in the graph, with input leaf 0 in eager" in problem

    def test_a_model_returning_its_input_checks_clean(self):
        """An output that is the input itself aliases it in eager and in the graph alike:
        check_inputs finds no difference (no error, no warning), and the graph returns its input."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gm = specfx.trace(lambda x: x, (torch.ones(2),), check_inputs=[torch.zeros(3)])
        x = torch.zeros(3)
        assert gm(x) is x

    def test_bad_tolerance_refused(self):
        with pytest.raises(TypeError, match=r"check_tolerance= takes \(rtol, atol\)"):
            specfx.trace(lambda x: x, (torch.ones(2),), check_inputs=[torch.zeros(3)], check_tolerance=1e-3)


class WithTensorDefault(nn.Module):
    def forward(self, x, w=torch.full((2,), 3.0)):  # noqa: B008 - the tensor default is the case tested
        return x * w


class TestTensorDefaults:
    def test_left_out_takes_the_default_and_given_takes_the_input(self):
        """A parameter whose default is a tensor may be left out or given, as in eager."""
        model = WithTensorDefault()
        gm = specfx.trace(model, (torch.ones(2),))
        x, w = torch.randn(2), torch.randn(2)
        assert torch.equal(gm(x), model(x))
        assert torch.equal(gm(x, w), model(x, w))
        assert torch.equal(gm(x, w=w), model(x, w=w))

    def test_survives_pickling(self):
        """Unpickling re-traces the graph; the default is still chosen inside it."""
        import pickle

        model = WithTensorDefault()
        gm = pickle.loads(pickle.dumps(specfx.trace(model, (torch.ones(2),))))
        x, w = torch.randn(2), torch.randn(2)
        assert torch.equal(gm(x), model(x))
        assert torch.equal(gm(x, w), model(x, w))

    def test_wrong_type_is_named(self):
        """Another kind of value for it is refused at entry, saying what was traced."""
        gm = specfx.trace(WithTensorDefault(), (torch.ones(2),))
        with pytest.raises(specfx.GuardError, match=r"w is an int \(3\), traced as a Tensor or left out"):
            gm(torch.ones(2), 3)
