"""specfx._capture.patches: every global change specfx makes while tracing is confined to
the tracing thread and undone to exactly what was there before."""

from __future__ import annotations

import builtins
import gc
import math
import threading

import pytest
import torch
import torch.fx._symbolic_trace as fx_trace
from torch import nn

import specfx
from specfx._capture import patches as _patches
class UsersIsinstance:
    """A user's (or another library's) own isinstance patch, counting its calls."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.calls = 0

    def __call__(self, obj, classinfo):
        self.calls += 1
        return self.wrapped(obj, classinfo)


@pytest.fixture
def users_isinstance():
    original = builtins.isinstance
    patched = UsersIsinstance(original)
    builtins.isinstance = patched
    try:
        yield patched
    finally:
        builtins.isinstance = original


class ChecksIsTensor(nn.Module):
    def forward(self, x):
        return x + 1 if isinstance(x, torch.Tensor) else x


class TestRestore:
    def test_a_previous_patch_of_isinstance_survives_a_trace(self, users_isinstance):
        specfx.trace(ChecksIsTensor(), (torch.ones(2),))
        assert builtins.isinstance is users_isinstance

    def test_a_failed_trace_restores_too(self, users_isinstance):
        def fails(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(specfx.SpecializationError):
            specfx.trace(fails, (torch.ones(2),))
        assert builtins.isinstance is users_isinstance

    def test_fx_functions_are_restored(self):
        codes = (fx_trace.is_fx_tracing.__code__, fx_trace.is_fx_symbolic_tracing.__code__)
        specfx.trace(ChecksIsTensor(), (torch.ones(2),))
        assert (fx_trace.is_fx_tracing.__code__, fx_trace.is_fx_symbolic_tracing.__code__) == codes
        assert not hasattr(fx_trace, "_specfx_fx_tracing_flag")

    def test_isinstance_answers_as_the_value_inside_the_trace(self):
        gm = specfx.trace(ChecksIsTensor(), (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))

    def test_patch_outside_a_session_is_refused(self):
        with pytest.raises(RuntimeError, match="tracing"):
            _patches.patch(math, "floor", lambda x: 0)

    def test_sessions_ending_out_of_order_restore_the_original(self):
        original = math.floor
        first_in, second_in, first_out = threading.Barrier(2), threading.Barrier(2), threading.Barrier(2)
        seen = {}

        def first():
            with _patches.tracing():
                _patches.patch(math, "floor", lambda x: "first")
                first_in.wait()
                second_in.wait()  # the second session is installed on top of ours
                seen["first"] = math.floor(1.5)
            first_out.wait()

        def second():
            first_in.wait()
            with _patches.tracing():
                _patches.patch(math, "floor", lambda x: "second")
                second_in.wait()
                first_out.wait()  # the first session has ended before this one
                seen["second"] = math.floor(1.5)

        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == {"first": "first", "second": "second"}
        assert math.floor is original

    def test_nested_sessions_see_their_own_replacement_then_the_outer(self):
        with _patches.tracing():
            _patches.patch(math, "floor", lambda x: "outer")
            with _patches.tracing():
                _patches.patch(math, "floor", lambda x: "inner")
                assert math.floor(1.5) == "inner"
            assert math.floor(1.5) == "outer"
            assert _patches.previous(math, "floor")(1.5) == 1
        assert math.floor(1.5) == 1

    def test_a_patch_made_over_ours_is_left_alone(self):
        def theirs(x):
            return "theirs"

        original = math.floor
        try:
            with _patches.tracing():
                _patches.patch(math, "floor", lambda x: "ours")
                math.floor = theirs
            assert math.floor is theirs
        finally:
            math.floor = original

    def test_an_inherited_method_is_restored_by_deleting_the_override(self):
        class Base:
            def f(self):
                return "base"

        class Child(Base):
            pass

        with _patches.tracing():
            _patches.patch(Child, "f", lambda self: "patched")
            assert Child().f() == "patched"
        assert "f" not in Child.__dict__
        assert Child().f() == "base"


class TestFxTracingFlag:
    def test_value_computation_sees_no_trace_without_a_global_write(self):
        # a leaf asking "am I traced?" while its value is computed takes its eager path, and
        # torch.fx's process-wide flag keeps torch.fx's value (another thread may read it)
        seen = []

        class AsksLeaf(nn.Module):
            def forward(self, x):
                seen.append((fx_trace.is_fx_tracing(), fx_trace._is_fx_tracing_flag))
                return x + 1

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.leaf = AsksLeaf()

            def forward(self, x):
                return self.leaf(x)

        specfx.trace(Model(), (torch.ones(2),), leaf_modules=[AsksLeaf])
        assert seen == [(False, True)]
        assert fx_trace._is_fx_tracing_flag is False


class TestFullCollectionsPutOff:
    """A trace puts off the collector's full collections and gives the user's setting back."""

    class _ThresholdProbe(nn.Module):
        def __init__(self, report):
            super().__init__()
            self.report = report

        def forward(self, x):
            self.report(gc.get_threshold())
            return x + 1

    def _trace_seen(self, examples=True):
        seen = []
        probe = self._ThresholdProbe(seen.append)
        specfx.trace(probe, (torch.zeros(2),) if examples else None, leaf_modules=[self._ThresholdProbe])
        return seen

    def test_the_threshold_is_off_inside_and_the_users_afterwards(self):
        before = gc.get_threshold()
        try:
            gc.set_threshold(500, 7, 9)
            seen = self._trace_seen()
            assert seen and seen[-1][:2] == (500, 7) and seen[-1][2] > 10_000
            assert gc.get_threshold() == (500, 7, 9)
        finally:
            gc.set_threshold(*before)

    def test_a_trace_that_raises_gives_the_threshold_back(self):
        before = gc.get_threshold()

        class Fails(nn.Module):
            def forward(self, x):
                if x.sum() > 0:  # a data decision the default policy refuses
                    return x
                return -x

        with pytest.raises(specfx.SpecializationError):
            specfx.trace(Fails(), (torch.ones(2),))
        assert gc.get_threshold() == before

    def test_a_setting_changed_during_the_trace_is_kept(self):
        before = gc.get_threshold()

        class Changes(nn.Module):
            def forward(self, x):
                gc.set_threshold(300, 5, 5)
                return x + 1

        try:
            specfx.trace(Changes(), (torch.zeros(2),))
            assert gc.get_threshold() == (300, 5, 5)
        finally:
            gc.set_threshold(*before)

    def test_automatic_collection_off_stays_off(self):
        before = gc.get_threshold()
        try:
            gc.set_threshold(0)
            assert self._trace_seen()[-1][0] == 0
            assert gc.get_threshold()[0] == 0
        finally:
            gc.set_threshold(*before)

    def test_nested_sessions_restore_once(self):
        before = gc.get_threshold()
        with _patches.no_full_collections():
            inside = gc.get_threshold()
            with _patches.no_full_collections():
                assert gc.get_threshold() == inside
            assert gc.get_threshold() == inside
        assert gc.get_threshold() == before


class TestClassmethodPatch:
    class Base:
        @classmethod
        def make(cls, value):
            return (cls.__name__, value)

    class Child(Base):
        pass

    def test_subclasses_reach_the_replacement_in_the_session_only(self):
        """The replacement gets the class the method was called on; outside the session, and
        in another thread during it, the previous classmethod answers; it is put back after."""
        original = self.Base.__dict__["make"]
        seen = []
        with _patches.tracing():
            _patches.patch_classmethod(self.Base, "make", lambda cls, value: ("patched", cls.__name__, value))
            assert self.Child.make(1) == ("patched", "Child", 1)
            thread = threading.Thread(target=lambda: seen.append(self.Child.make(2)))
            thread.start()
            thread.join()
        assert seen == [("Child", 2)]
        assert self.Child.make(3) == ("Child", 3)
        assert self.Base.__dict__["make"] is original


def _make_pair(value):
    return ("pair", value)


class TestCallsPatch:
    def test_references_taken_before_reach_the_replacement_in_the_session_only(self):
        """An alias and a bound method taken before the session reach the replacement, which
        reaches the original code; another thread meanwhile, and everyone after, the original;
        the function's code and its module's globals are put back."""

        class Maker:
            def make(self, value):
                return (type(self).__name__, value)

        held_function, held_method = _make_pair, Maker().make
        code, names = _make_pair.__code__, set(globals())
        seen = []
        with _patches.tracing():
            _patches.patch_calls(_make_pair, lambda original, value: ("patched", *original(value)))
            _patches.patch_calls(Maker.make, lambda original, self, value: ("patched", *original(self, value)))
            assert held_function(1) == ("patched", "pair", 1)
            assert held_method(1) == ("patched", "Maker", 1)
            thread = threading.Thread(target=lambda: seen.extend([held_function(2), held_method(2)]))
            thread.start()
            thread.join()
        assert seen == [("pair", 2), ("Maker", 2)]
        assert held_function(3) == ("pair", 3) and held_method(3) == ("Maker", 3)
        assert _make_pair.__code__ is code and set(globals()) == names

    def test_a_closure_and_super_keep_working(self):
        """The swapped code keeps the function's free variables (super()'s __class__ cell)."""

        class Base:
            def name(self):
                return "base"

        class Child(Base):
            def name(self):
                return "child of " + super().name()

        held = Child().name
        with _patches.tracing():
            _patches.patch_calls(Child.name, lambda original, self: original(self).upper())
            assert held() == "CHILD OF BASE"
        assert held() == "child of base"
