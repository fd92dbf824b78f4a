"""Tests for ``specfx.specialize``: the decorator, the context manager and their scoping."""

from __future__ import annotations

import inspect
import threading

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy, SpecializationError, Specialize, specialize
from specfx._policy.scope import annotations_active, current_layers

TIMEOUT = 10  # seconds a thread may wait at a barrier before the test fails


def split_cat(x):
    """Iterates over a traced value: needs ITER_LEN."""
    return torch.cat([*torch.split(x, 2, dim=1)], dim=1)


@specialize(iter=True)
def split_all(x):
    """A helper that may iterate."""
    return [*torch.split(x, 2, dim=1)]


@specialize(iter=False)
def split_forbidden(x):
    """A helper that forbids iterating."""
    return [*torch.split(x, 2, dim=1)]


class Plain(nn.Module):
    def forward(self, x):
        return torch.cat([*torch.split(x, 2, dim=1)], dim=1)


class Decorated(nn.Module):
    @specialize(iter=True)
    def forward(self, x):
        return torch.cat([*torch.split(x, 2, dim=1)], dim=1)


@specialize(iter=True)
class DecoratedClass(nn.Module):
    def forward(self, x):
        return torch.cat([*torch.split(x, 2, dim=1)], dim=1)


class Nested(nn.Module):
    @specialize(iter=True)
    def forward(self, x):
        return torch.cat(split_forbidden(x), dim=1)


class HelperOnly(nn.Module):
    def forward(self, x):
        return torch.cat(split_all(x), dim=1)


class HelperThenLoop(nn.Module):
    def forward(self, x):
        parts = split_all(x)  # allowed inside the helper
        return torch.cat([*torch.split(torch.cat(parts, dim=1), 2, dim=1)], dim=1)  # not out here


class Branchy(nn.Module):
    def forward(self, x):
        with specialize(bool=True):
            if x.sum() > 0:
                return x + 1
        return x - 1


class BranchAfterBlock(nn.Module):
    def forward(self, x):
        with specialize(bool=True):
            y = x * 2
        if y.sum() > 0:
            return y
        return -y


class ForbiddenBranch(nn.Module):
    def forward(self, x):
        with specialize(bool=False):
            if x.sum() > 0:
                return x + 1
        return x - 1


class Other(nn.Module):
    @specialize(bool=True)
    def forward(self, x):
        if x.mean() > 0:
            return x.relu()
        return x.sigmoid()


def example():
    return torch.arange(8.0).reshape(2, 4)


class TestSpecializeDecorator:
    """``@specialize(...)`` on functions, methods, staticmethods and nn.Module subclasses."""

    def test_function_result_unchanged(self):
        """A decorated function returns what the undecorated one returns."""
        x = example()
        assert torch.equal(torch.cat(split_all(x), dim=1), split_cat(x))

    def test_wraps_preserves_metadata(self):
        """The wrapper keeps the function's name, docstring, signature and ``__wrapped__``."""

        def scale(x, factor: float = 2.0, *, bias=None):
            """Scale x."""
            return x * factor

        wrapped = specialize(iter=True)(scale)
        assert wrapped.__name__ == "scale"
        assert wrapped.__qualname__ == scale.__qualname__
        assert wrapped.__doc__ == "Scale x."
        assert wrapped.__wrapped__ is scale
        assert inspect.signature(wrapped) == inspect.signature(scale)
        assert inspect.unwrap(wrapped) is scale

    def test_no_layers_in_eager(self):
        """Outside a trace the decorated code sees no policy layers."""
        seen = []

        @specialize(iter=True, bool=False)
        def record(x):
            seen.append(current_layers())
            return x + 1

        assert torch.equal(record(torch.ones(2)), torch.full((2,), 2.0))
        assert seen == [()]
        assert current_layers() == ()

    def test_exceptions_pass_through(self):
        """An exception from the decorated function reaches the caller unchanged."""

        @specialize(bool=True)
        def fail():
            raise KeyError("boom")

        with pytest.raises(KeyError, match="boom"):
            fail()
        assert current_layers() == ()

    def test_method(self):
        """A decorated method binds self and returns the same result."""

        class Thing:
            @specialize(iter=True)
            def parts(self, x):
                return len([*torch.split(x, 2, dim=1)])

        assert Thing().parts(example()) == 2
        assert Thing.parts.__name__ == "parts"

    def test_staticmethod_and_classmethod_either_order(self):
        """@specialize works above or below @staticmethod/@classmethod."""

        class Thing:
            @specialize(iter=True)
            @staticmethod
            def above(x):
                return x + 1

            @staticmethod
            @specialize(iter=True)
            def below(x):
                return x + 2

            @specialize(iter=True)
            @classmethod
            def klass(cls, x):
                return (cls.__name__, x)

        assert isinstance(Thing.__dict__["above"], staticmethod)
        assert isinstance(Thing.__dict__["klass"], classmethod)
        assert Thing.above(1) == 2 and Thing().above(1) == 2
        assert Thing.below(1) == 3
        assert Thing.klass(1) == ("Thing", 1)
        assert Thing.above.__name__ == "above"

    def test_module_class_wraps_forward(self):
        """Decorating an nn.Module subclass returns the class with its forward wrapped."""

        class Block(nn.Module):
            def forward(self, x):
                return x * 3

        original = Block.forward
        decorated = specialize(iter=True)(Block)
        assert decorated is Block
        assert Block.forward is not original
        assert Block.forward.__wrapped__ is original
        assert inspect.signature(Block.forward) == inspect.signature(original)
        assert torch.equal(Block()(torch.ones(2)), torch.full((2,), 3.0))

    def test_module_class_inherited_forward(self):
        """A decorated subclass wraps the forward it inherits, leaving the base class alone."""

        class Base(nn.Module):
            def forward(self, x):
                return x - 1

        @specialize(iter=True)
        class Child(Base):
            pass

        assert Child.forward.__wrapped__ is Base.__dict__["forward"]
        assert "__wrapped__" not in vars(Base.forward)
        assert torch.equal(Child()(torch.ones(1)), torch.zeros(1))

    @pytest.mark.parametrize(
        ("annotation", "policy"),
        [
            (specialize(iter=True), Policy(iter=True)),
            (specialize(Specialize.ITER_LEN), Policy(iter=True)),
            (specialize("iter,bool"), Policy(iter=True, bool=True)),
            (specialize(Specialize.ALL, bool=False), Policy(Specialize.ALL, bool=False)),
            (specialize(iter=True, bool=False), Policy(iter=True, bool=False)),
            (specialize(), Policy()),
        ],
    )
    def test_policy(self, annotation, policy):
        """The annotation's policy grants and denies what its arguments say."""
        assert annotation.policy == policy

    @pytest.mark.parametrize(
        ("annotation", "text"),
        [
            (specialize(iter=True), "specialize(iter=True)"),
            (specialize(Specialize.ALL, scalars=False),
             "specialize(iter=True, bool=True, shapes=True, scalars=False)"),
            (specialize(), "specialize(Specialize.NONE)"),
        ],
    )
    def test_repr(self, annotation, text):
        """repr shows the keywords in force."""
        assert repr(annotation) == text

    def test_one_annotation_decorates_many(self):
        """A single specialize object can decorate several functions."""
        annotation = specialize(iter=True)
        first = annotation(lambda x: x + 1)
        second = annotation(lambda x: x * 2)
        assert (first(1), second(1)) == (2, 2)


class TestSpecializeErrors:
    """``specialize``: misuse fails at decoration time with a clear message."""

    def test_bare_on_function(self):
        """Bare @specialize on a function raises TypeError showing the called form."""
        with pytest.raises(TypeError, match=r"write @specialize\(iter=True\).*not a bare @specialize"):

            @specialize
            def f(x):
                return x

    def test_bare_on_module_class(self):
        """Bare @specialize on a class raises the same TypeError."""
        with pytest.raises(TypeError, match=r"@specialize\(iter=True\)"):

            @specialize
            class Block(nn.Module):
                def forward(self, x):
                    return x

    @pytest.mark.parametrize("target", [42, "forward", None])
    def test_non_callable(self, target):
        """Decorating something that is not callable raises TypeError naming it."""
        with pytest.raises(TypeError, match=r"@specialize decorates functions, methods and nn\.Module "
                                            rf"subclasses; got {target!r}"):
            specialize(iter=True)(target)

    def test_non_module_class(self):
        """Decorating a class that is not an nn.Module raises TypeError and leaves the class alone."""

        class Thing:
            def forward(self, x):
                return x

        original = Thing.forward
        with pytest.raises(TypeError, match=r"@specialize on a class needs an nn\.Module subclass.*Thing is not one"):
            specialize(iter=True)(Thing)
        assert Thing.forward is original

    def test_unknown_keyword(self):
        """An unknown keyword raises TypeError naming it."""
        with pytest.raises(TypeError, match="shape"):
            specialize(shape=True)

    def test_non_bool_keyword(self):
        """A keyword value that is not True/False/None raises TypeError."""
        with pytest.raises(TypeError, match=r"iter= takes True, False or None; got 1 \(int\)"):
            specialize(iter=1)

    def test_unknown_flag_string(self):
        """An unknown word in a flags string raises ValueError listing the allowed values."""
        with pytest.raises(ValueError, match=r"unknown specialization flag 'iterate'; allowed: iter, bool"):
            specialize("iterate")

    def test_bad_flags_type(self):
        """Flags that are neither Specialize nor str raise TypeError."""
        with pytest.raises(TypeError, match="flags must be a specfx.Specialize"):
            specialize(3)


@pytest.fixture
def honouring():
    """Run as model code does under a trace that honours annotations."""
    token = annotations_active().set(True)
    yield
    annotations_active().reset(token)


@pytest.mark.usefixtures("honouring")
class TestSpecializeContextManager:
    """``with specialize(...):`` pushes a layer for the block."""

    def test_pushes_and_pops(self):
        """Inside the block one layer with the block's policy is in force; after it, none."""
        with specialize(bool=True) as annotation:
            line = inspect.currentframe().f_lineno - 1
            layers = current_layers()
        assert isinstance(annotation, specialize)
        assert [layer.policy for layer in layers] == [Policy(bool=True)]
        assert layers[0].origin == f"with specialize(bool=True) at {__file__}:{line}"
        assert current_layers() == ()

    def test_nested_blocks(self):
        """Nested blocks stack outermost first and unwind in order."""
        with specialize(iter=True):
            with specialize(bool=False):
                inner = [layer.policy for layer in current_layers()]
            middle = [layer.policy for layer in current_layers()]
        assert inner == [Policy(iter=True), Policy(bool=False)]
        assert middle == [Policy(iter=True)]
        assert current_layers() == ()

    def test_exception_still_pops(self):
        """An exception inside the block propagates and the layer is popped."""
        with pytest.raises(ZeroDivisionError):
            with specialize(iter=True):
                with specialize(bool=True):
                    1 / 0  # noqa: B018
        assert current_layers() == ()

    def test_same_instance_reentrant(self):
        """One specialize object can be entered again while already active."""
        annotation = specialize(scalars=True)
        with annotation:
            with annotation:
                depth = len(current_layers())
            assert len(current_layers()) == 1
        assert depth == 2
        assert current_layers() == ()

    def test_reusable(self):
        """A specialize object can be used for several blocks one after another."""
        annotation = specialize(iter=True)
        for _ in range(3):
            with annotation:
                assert len(current_layers()) == 1
        assert current_layers() == ()

    def test_caller_block_does_not_leak_into_trace(self):
        """A with-block around specfx.trace is not part of the traced code and survives the trace."""
        with specialize(iter=True):
            with pytest.raises(SpecializationError):
                specfx.trace(Plain(), example())
            assert [layer.policy for layer in current_layers()] == [Policy(iter=True)]
        assert current_layers() == ()


class TestSpecializeEager:
    """Outside a trace the context manager does nothing."""

    def test_block_outside_trace_pushes_nothing(self):
        """In eager code a with-block leaves the layer stack empty."""
        with specialize(bool=True):
            assert current_layers() == ()
        assert current_layers() == ()


class TestSpecializeThreads:
    """``specialize`` scope state is per thread."""

    def test_threads_see_only_their_own_blocks(self):
        """Two threads inside different with-blocks at the same time each see only their own layer."""
        barrier = threading.Barrier(2, timeout=TIMEOUT)
        seen, errors = {}, []

        def work(name, annotation):
            try:
                annotations_active().set(True)  # each thread has its own context
                with annotation:
                    barrier.wait()  # both threads are inside their blocks now
                    seen[name] = [layer.policy for layer in current_layers()]
                    barrier.wait()  # neither leaves before both have looked
                seen[name + " after"] = current_layers()
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=work, args=("a", specialize(iter=True))),
                   threading.Thread(target=work, args=("b", specialize(bool=False)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert not errors
        assert seen == {"a": [Policy(iter=True)], "b": [Policy(bool=False)], "a after": (), "b after": ()}
        assert current_layers() == ()

    def test_eager_call_in_other_thread_during_trace(self):
        """While one thread traces, decorated code called eagerly in another thread runs unchanged."""
        inside, outside = threading.Barrier(2, timeout=TIMEOUT), threading.Barrier(2, timeout=TIMEOUT)
        seen, errors = {}, []

        class Waits(nn.Module):
            @specialize(iter=True)
            def forward(self, x):
                seen["tracing"] = [layer.origin for layer in current_layers()]
                inside.wait()
                outside.wait()
                return torch.cat([*torch.split(x, 2, dim=1)], dim=1)

        class Eager(nn.Module):
            @specialize(iter=True)
            def forward(self, x):
                seen["eager"] = current_layers()
                return x * 2

        def tracing():
            try:
                seen["gm"] = specfx.trace(Waits(), example())
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                inside.abort()
                outside.abort()

        thread = threading.Thread(target=tracing)
        thread.start()
        inside.wait()
        try:
            seen["result"] = Eager()(torch.ones(2))
        finally:
            outside.wait()
            thread.join(TIMEOUT)
        assert not errors
        assert seen["tracing"] == [f"@specialize(iter=True) on {Waits.forward.__qualname__}"]
        assert seen["eager"] == ()
        assert torch.equal(seen["result"], torch.full((2,), 2.0))
        assert torch.equal(seen["gm"](example()), example())

    def test_concurrent_traces_match_sequential(self):
        """Two threads tracing two decorated models at once get the graphs a sequential trace gives."""
        models = {"iter": (Decorated(), example()), "bool": (Other(), example())}
        expected = {name: specfx.trace(model, x).code for name, (model, x) in models.items()}
        barrier = threading.Barrier(2, timeout=TIMEOUT)
        codes, errors = {}, []

        def work(name):
            model, x = models[name]
            try:
                barrier.wait()
                codes[name] = specfx.trace(model, x).code
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=work, args=(name,)) for name in models]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert not errors
        assert codes == expected
        assert "specfx_guard_len" in codes["iter"] and "specfx_guard_truth" in codes["bool"]


def guard_kinds(gm):
    return [s.kind for s in gm.specializations]


class TestSpecializeTracing:
    """``specialize`` under ``specfx.trace``: the annotated scope decides what may be specialized."""

    @pytest.mark.parametrize("model", [Decorated(), DecoratedClass(), HelperOnly()], ids=type)
    def test_decorated_code_iterates_without_policy(self, model):
        """Decorated code may iterate a traced value; the graph matches eager and guards the length."""
        x = example()
        gm = specfx.trace(model, x)
        assert torch.equal(gm(x), model(x))
        assert guard_kinds(gm) == ["iter"]
        assert "specfx_guard_len" in gm.code
        other = torch.randn(3, 4)
        assert torch.equal(gm(other), model(other))
        with pytest.raises(specfx.GuardError):
            gm(torch.randn(2, 6))  # three chunks instead of two

    def test_undecorated_raises_suggesting_decorator(self):
        """The same code undecorated raises SpecializationError that suggests @specialize(iter=True)."""
        with pytest.raises(SpecializationError,
                           match=r"decorate Plain\.forward with @specialize\(iter=True\)") as info:
            specfx.trace(Plain(), example())
        assert info.value.flag is Specialize.ITER_LEN
        assert "Specialize.ITER_LEN is not allowed by the policy in force" in str(info.value)

    def test_scope_ends_when_helper_returns(self):
        """Iteration after the decorated helper has returned is outside its scope again."""
        with pytest.raises(SpecializationError, match=r"@specialize\(iter=True\)") as info:
            specfx.trace(HelperThenLoop(), example())
        assert "HelperThenLoop.forward" in str(info.value)

    def test_inner_decorator_forbids(self):
        """An inner @specialize(iter=False) forbids iteration inside an outer iter=True scope, and says so."""
        with pytest.raises(SpecializationError, match=r"forbidden here by @specialize\(iter=False\) on "
                                                      r"split_forbidden"):
            specfx.trace(Nested(), example())

    def test_decorator_overrides_trace_policy_denial(self):
        """The annotation is inside the trace policy, so it wins for the flag it names."""
        gm = specfx.trace(Decorated(), example(), policy=Policy(iter=False))
        assert guard_kinds(gm) == ["iter"]

    def test_trace_policy_denial_reported(self):
        """A denial in the trace policy is named as the forbidding layer."""
        with pytest.raises(SpecializationError, match=r"forbidden here by trace\(policy=Policy\(iter=False\)\)"):
            specfx.trace(Plain(), example(), policy=Policy(iter=False))

    def test_inner_annotation_keeps_unnamed_flags(self):
        """An inner annotation leaves the flags it does not name as the outer scope set them."""

        @specialize(iter=True)
        def parts(x):
            if x.sum() > 0:  # BOOL comes from the outer annotation
                return [*torch.split(x, 2, dim=1)]
            return [x]

        class Outer(nn.Module):
            @specialize(bool=True)
            def forward(self, x):
                return torch.cat(parts(x), dim=1)

        gm = specfx.trace(Outer(), example())
        assert sorted(guard_kinds(gm)) == ["bool", "iter"]
        assert torch.equal(gm(example()), example())

    def test_staticmethod_helper(self):
        """A decorated staticmethod helper is honoured under trace."""

        class Model(nn.Module):
            @specialize(iter=True)
            @staticmethod
            def parts(x):
                return [*torch.split(x, 2, dim=1)]

            def forward(self, x):
                return torch.cat(self.parts(x), dim=1)

        gm = specfx.trace(Model(), example())
        assert guard_kinds(gm) == ["iter"]

    def test_annotations_false_ignores_decorators(self):
        """Policy(annotations=False) traces as if the decorators were not there."""
        with pytest.raises(SpecializationError, match="not allowed by the policy in force"):
            specfx.trace(Decorated(), example(), policy=Policy(annotations=False))

    def test_annotations_false_ignores_denials(self):
        """With annotations=False an @specialize(iter=False) no longer forbids what the trace policy grants."""
        gm = specfx.trace(Nested(), example(), policy=Policy(iter=True, annotations=False))
        assert guard_kinds(gm) == ["iter"]

    def test_with_block_allows_branch(self):
        """`with specialize(bool=True):` lets `if x.sum() > 0:` trace, guarded on the branch taken."""
        model, x = Branchy(), example()
        gm = specfx.trace(model, x)
        assert torch.equal(gm(x), model(x))
        assert guard_kinds(gm) == ["bool"]
        assert "specfx_guard_truth" in gm.code
        with pytest.raises(specfx.GuardError):
            gm(-x - 1)

    def test_with_block_ends(self):
        """A branch after the with-block is outside it again."""
        with pytest.raises(SpecializationError, match=r"@specialize\(bool=True\)"):
            specfx.trace(BranchAfterBlock(), example())

    def test_with_block_forbids(self):
        """`with specialize(bool=False):` forbids a branch the trace policy allows, naming the block."""
        with pytest.raises(SpecializationError, match=r"forbidden here by with specialize\(bool=False\) at "
                                                      r".*test_scope\.py:\d+"):
            specfx.trace(ForbiddenBranch(), example(), policy=Policy(bool=True))

    def test_annotations_false_ignores_with_blocks(self):
        """Policy(annotations=False) ignores the context-manager form too."""
        with pytest.raises(SpecializationError):
            specfx.trace(Branchy(), example(), policy=Policy(annotations=False))

    def test_layers_during_trace(self):
        """While traced, decorated code sees its own layer; afterwards nothing is left behind."""
        seen = []

        class Rec(nn.Module):
            @specialize(iter=True)
            def forward(self, x):
                seen.append(current_layers())
                return x + 1

        specfx.trace(Rec(), example())
        (layers,) = seen
        assert [layer.policy for layer in layers] == [Policy(iter=True)]
        assert layers[0].origin == f"@specialize(iter=True) on {Rec.forward.__qualname__}"
        assert current_layers() == ()

    def test_eager_unchanged_after_trace(self):
        """Tracing leaves the decorated model running eagerly as before."""
        model, x = Decorated(), example()
        before = model(x)
        specfx.trace(model, x)
        assert torch.equal(model(x), before)
        assert current_layers() == ()
