"""Objects forward tests by identity: sentinel defaults (`k=SENTINEL`, `if k is SENTINEL:`),
dataclass and function defaults, objects passed in, and numbers tested against an object.

Each test runs eager and the graph on the same inputs: the graph answers as eager or raises
GuardError; it never takes the other branch silently.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError

ALL = Policy(iter=True, bool=True, shapes=True, scalars=True)
SENTINEL = object()


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


@dataclasses.dataclass
class Config:
    scale: float = 2.0


DEFAULT = Config()


class Mode(enum.Enum):
    A = 1
    B = 2


def x2():
    return torch.arange(2.0) + 1


def same_or_guard(gm, model, *args):
    """The graph's answer equals eager's, or the graph raises GuardError (returns which)."""
    want = model(*args)
    try:
        got = gm(*args)
    except GuardError:
        return "guard"
    assert torch.equal(got, want)
    return "equal"


class Sentinel(nn.Module):
    def forward(self, x, k=SENTINEL):
        if k is SENTINEL:
            return x * 2
        return x * k


class FillsDefault(nn.Module):
    def forward(self, x, k=MISSING):
        if k is MISSING:
            k = x.shape[0]
        return x * k


def checks_sentinel(x, k):
    return x * 2 if k is SENTINEL else x * 3


class PassesOn(nn.Module):
    def forward(self, x, k=SENTINEL):
        return checks_sentinel(x, k)


class TestSentinelDefaults:
    def test_left_out_takes_eager_path(self):
        model = Sentinel()
        gm = specfx.trace(model, (x2(),), policy=ALL)
        assert torch.equal(gm(x2()), model(x2()))
        assert torch.equal(gm(x2(), SENTINEL), model(x2(), SENTINEL))  # passing the default itself
        assert "k is left out (its default), but for this input k is another object, 3" in str(
            pytest.raises(GuardError, gm, x2(), 3).value)

    def test_number_passed_is_answered(self):
        """`k is SENTINEL` with an int passed: False in eager and the graph, for every int."""
        model = Sentinel()
        gm = specfx.trace(model, (x2(), 3), policy=ALL)
        for k in (3, 4, 7):
            assert torch.equal(gm(x2(), k), model(x2(), k))
        with pytest.raises(GuardError, match="traced as an int"):
            gm(x2())

    def test_default_filled_in_forward(self):
        model = FillsDefault()
        gm = specfx.trace(model, (x2(),))  # the size stays symbolic
        for x in (x2(), torch.ones(5)):
            assert torch.equal(gm(x), model(x))
        gm = specfx.trace(model, (x2(), 4))
        assert torch.equal(gm(x2(), 5), model(x2(), 5))

    def test_identity_in_a_called_function(self):
        model = PassesOn()
        assert same_or_guard(specfx.trace(model, (x2(),), policy=ALL), model, x2(), 3) == "guard"
        gm = specfx.trace(model, (x2(), 3), policy=ALL)
        assert torch.equal(gm(x2(), 4), model(x2(), 4))

    def test_graph_survives_copies_saving_and_retracing(self):
        model = Sentinel()
        gm = specfx.trace(model, (x2(),), policy=ALL)
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        for copied in (loaded, copy.deepcopy(gm), torch.fx.symbolic_trace(gm), specfx.trace(gm, (x2(),))):
            assert torch.equal(copied(x2()), model(x2()))
            with pytest.raises(GuardError):
                copied(x2(), 3)

    def test_signature_names_the_default(self):
        gm = specfx.trace(Sentinel(), (x2(),), policy=ALL)
        assert "k = 'specfx-left-out:tests.test_identity_defaults:Sentinel.forward:k:" in gm.code


class TestObjectDefaultsAndInputs:
    @pytest.mark.parametrize("example", [(), (Config(3.0),), (DEFAULT,)], ids=["left-out", "other", "default"])
    def test_dataclass_identity(self, example):
        class Scaled(nn.Module):
            def forward(self, x, config=DEFAULT):
                return x * (config.scale if config is DEFAULT else -config.scale)

        model = Scaled()
        gm = specfx.trace(model, (x2(), *example), policy=ALL)
        assert torch.equal(gm(x2(), *example), model(x2(), *example))
        for other in [(), (Config(),), (Config(3.0),), (DEFAULT,)]:
            same_or_guard(gm, model, x2(), *other)
        if example != (DEFAULT,):  # an equal but other object: eager's other branch, so the graph raises
            with pytest.raises(GuardError):
                gm(x2(), Config())

    def test_function_default(self):
        class Activated(nn.Module):
            def forward(self, x, act=F.relu):
                return act(x) * (2 if act is F.relu else 3)

        model = Activated()
        gm = specfx.trace(model, (x2() - 2,), policy=ALL)
        assert torch.equal(gm(x2() - 2), model(x2() - 2))
        assert same_or_guard(gm, model, x2() - 2, torch.tanh) == "guard"
        gm = specfx.trace(model, (x2() - 2, torch.tanh), policy=ALL)
        assert torch.equal(gm(x2() - 2, torch.tanh), model(x2() - 2, torch.tanh))
        assert same_or_guard(gm, model, x2() - 2) == "guard"

    def test_enum_default_of_a_local_class(self):
        class Local(enum.Enum):
            P = 1
            Q = 2

        class Moded(nn.Module):
            def forward(self, x, mode=Local.P):
                return x * (2 if mode is Local.P else 3)

        model = Moded()
        gm = specfx.trace(model, (x2(),), policy=ALL)
        assert torch.equal(gm(x2()), model(x2()))
        assert same_or_guard(gm, model, x2(), Local.Q) == "guard"

    def test_attribute_of_an_input_tested_by_identity(self):
        @dataclasses.dataclass
        class Holder:
            mode: Mode = Mode.A

        def f(x, holder):
            return x * (2 if holder.mode is Mode.A else 3)

        holder = Holder()
        gm = specfx.trace(f, (x2(), holder), policy=ALL)
        assert torch.equal(gm(x2(), holder), f(x2(), holder))
        assert same_or_guard(gm, f, x2(), Holder(Mode.B)) == "guard"

    def test_object_passed_on_and_tested_is_refused(self):
        def passes_on(x, k):
            return checks_sentinel(x, k)

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(passes_on, (x2(), DEFAULT), policy=ALL)
        assert "`k` is compared by identity" in str(caught.value)
        assert "Fix: test it in forward itself" in str(caught.value)
        assert "test_identity_defaults.py" in str(caught.value)

    def test_object_without_identity_test_stays_an_input(self):
        """A dataclass input only read (`cfg.scale`) is read by the graph at run time, as before."""
        def f(x, config):
            return x * config.scale

        gm = specfx.trace(f, (x2(), Config()), policy=ALL)
        assert torch.equal(gm(x2(), Config(5.0)), f(x2(), Config(5.0)))


class TestNumbersAgainstObjects:
    def test_number_is_not_an_object(self):
        def f(x, n):
            return x * (1 if n is SENTINEL else n)

        gm = specfx.trace(f, (x2(), 3))
        for n in (3, 5):
            assert torch.equal(gm(x2(), n), f(x2(), n))

    def test_number_against_a_number_stays_refused(self):
        four = 4

        def f(x, n):
            return x * (1 if n is four else n)

        with pytest.raises(SpecializationError, match="compared by identity"):
            specfx.trace(f, (x2(), 3))
