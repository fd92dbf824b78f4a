"""The exact texts users read: pinned, because error messages are a feature."""

from __future__ import annotations

import pickle

import pytest
import torch

import specfx
from specfx import GuardError, Policy, SpecializationError, specialize

from .models import MODELS_FILE, SplitCat, line_of

SEED_LINE = line_of(SplitCat.forward, "self.call_cat(*x)")


def _message(exc_info):
    return str(exc_info.value)


class TestSpecializationError:
    def test_denied_message(self):
        """Refusal: what, traced value, which flag, the fixes, the user's line."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3))
        assert _message(caught) == (
            "iterating over `split` (a loop, *split, tuple() or list()) needs a concrete value "
            "(traced value: 2), but Specialize.ITER_LEN is not allowed by the policy in force.\n"
            "Fix: pass policy=Policy(iter=True) to specfx.trace; or decorate SplitCat.forward with "
            "@specialize(iter=True).\n"
            f"  at {MODELS_FILE}:{SEED_LINE}: return self.call_cat(*x)"
        )
        assert caught.value.location == f"{MODELS_FILE}:{SEED_LINE}"
        assert caught.value.operation.startswith("iterating over `split`")

    def test_forbidden_by_annotation_message(self):
        """A denial by an annotation names that annotation."""

        @specialize(bool=False)
        def strict(x):
            if x.sum() > 0:
                return x
            return -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(strict, torch.ones(2), policy=Policy(bool=True))
        origin = "@specialize(bool=False) on TestSpecializationError.test_forbidden_by_annotation_message.<locals>.strict"
        assert _message(caught).splitlines()[:2] == [
            f"bool() of `gt` needs a concrete value (traced value: True), but Specialize.BOOL is "
            f"forbidden here by {origin}.",
            f"Fix: remove bool=False from {origin}, or keep `bool() of `gt`` out of that code.",
        ]

    def test_no_examples_message_keeps_fx_text(self):
        """Without examples the message contains torch.fx's own text and suggests examples."""

        def f(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f)
        first, fix, where = _message(caught).splitlines()
        assert first == (
            "bool() of `gt` needs a concrete value, but `gt` was traced without example inputs, so it has "
            "none (symbolically traced variables cannot be used as inputs to control flow)."
        )
        assert fix.startswith("Fix: pass representative example inputs, e.g. specfx.trace(model, (example_input,), "
                              "policy=Policy(bool=True))")
        assert where.strip().endswith("return x if x.sum() > 0 else -x")
        assert isinstance(caught.value, torch.fx.proxy.TraceError)

    def test_meta_message(self):
        """A data decision on meta tensors says meta tensors have no data."""

        def f(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f, torch.empty(2, device="meta"), policy=Policy(bool=True))
        assert _message(caught).splitlines()[0] == (
            "bool() of `gt` depends on tensor data, but `gt` is on the meta device: meta tensors carry "
            "shapes and dtypes but no data, so there is no value to decide on."
        )

    def test_config_input_suggests_concrete_args(self):
        """A Python bool input used in `if` also suggests concrete_args."""

        def f(x, flag):
            return x + 1 if flag else x

        with pytest.raises(SpecializationError, match=r"concrete_args=\{'flag': True\}"):
            specfx.trace(f, (torch.ones(1), True))


class TestGuardError:
    def test_message(self):
        """Guard failure: the assumption, traced vs actual, the source line, how to retrace."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy=Policy(iter=True))
        with pytest.raises(GuardError) as caught:
            gm(torch.randn(1, 6, 3, 3))
        assert _message(caught) == (
            "specfx guard failed: the graph was traced assuming len(split) == 2, but for this input "
            "len(split) == 3.\n"
            f"  assumed at {MODELS_FILE}:{SEED_LINE}: return self.call_cat(*x)\n"
            "The graph is only valid for inputs that keep this assumption. Retrace with an example input "
            "like this one (specfx.trace(model, example_inputs, policy=...)), or narrow the policy so that "
            "this value stays symbolic."
        )

    def test_wrong_input_type_is_a_guard_error(self):
        """An input of the wrong type fails the guard as GuardError, not TypeError."""

        def f(x, mask=None):
            return x if mask is None else x * mask

        gm = specfx.trace(f, torch.ones(2))
        with pytest.raises(GuardError, match="mask is None, but for this input mask is not None"):
            gm(torch.ones(2), torch.ones(2))

    def test_pickles_with_fields(self):
        """GuardError keeps its message and fields across pickling."""
        error = GuardError("boom", expected=2, actual=3, where="m.py:1")
        again = pickle.loads(pickle.dumps(error))
        assert (str(again), again.expected, again.actual, again.where) == ("boom", 2, 3, "m.py:1")

    def test_hierarchy(self):
        """Both errors subclass SpecfxError and the nearest builtin."""
        assert issubclass(GuardError, RuntimeError) and issubclass(GuardError, specfx.SpecfxError)
        assert issubclass(SpecializationError, ValueError)
        assert issubclass(SpecializationError, torch.fx.proxy.TraceError)
        assert issubclass(specfx.TraceCheckError, AssertionError)


class TestArgumentErrors:
    def test_example_inputs_not_matching_signature(self):
        """Too many example inputs: TypeError showing the signature."""
        with pytest.raises(TypeError) as caught:
            specfx.trace(SplitCat(), (torch.ones(1), torch.ones(1)))
        assert str(caught.value) == (
            "the example inputs do not fit SplitCat.forward(x): too many positional arguments. "
            "Pass example_inputs as a tuple of positional arguments and example_kwargs as a dict"
        )

    def test_unknown_example_kwarg(self):
        """An example kwarg the signature lacks is a TypeError naming it."""
        with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
            specfx.trace(SplitCat(), (torch.ones(1, 4, 1, 1),), {"y": 1})

    def test_concrete_args_conflict(self):
        """A parameter given both as example and concrete arg is refused."""
        with pytest.raises(TypeError, match="x given both as example input and in concrete_args"):
            specfx.trace(SplitCat(), torch.ones(1, 4, 1, 1), concrete_args={"x": torch.fx.PH})

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"policy": 3}, "policy= takes a specfx.Policy"),
            ({"policy": "iter,nope"}, "unknown specialization flag 'nope'"),
            ({"guards": "yes"}, "guards= takes True or False"),
            ({"leaf_modules": [3]}, "leaf_modules= takes nn.Module subclasses"),
            ({"example_kwargs": [1]}, "example_kwargs= takes a dict"),
        ],
    )
    def test_bad_trace_arguments(self, kwargs, match):
        """Each bad trace() argument gets a TypeError/ValueError saying what is expected."""
        with pytest.raises((TypeError, ValueError), match=match):
            specfx.trace(SplitCat(), torch.ones(1, 4, 1, 1), **kwargs)

    def test_not_callable_root(self):
        """trace() of something that is neither module nor function is a TypeError."""
        with pytest.raises(TypeError, match="takes an nn.Module or a function"):
            specfx.trace(42)
