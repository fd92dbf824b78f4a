"""Every answer taken from an example is guarded or refused, class by class.

Each test traces a program of one class and checks the promise on inputs that agree
and disagree with the example: the graph returns what eager returns, or raises
GuardError; what the policy does not grant is refused at trace time.
"""

from __future__ import annotations

import contextlib
import copy
import linecache
import random
import re

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, Policy, SpecializationError


def clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def same_or_guard(gm, fn, *args):
    """The promise on one input: eager's answer, or GuardError."""
    try:
        actual = gm(*clone(args))
    except GuardError:
        return "guard"
    expected = fn(*clone(args))
    torch.testing.assert_close(actual, expected)
    return "equal"


class TestRepeatedDecisionAfterInPlaceChange:  # class 1
    def test_item_after_add_is_decided_again(self):
        """`y.item()` after `y.add_(z)` is a new decision, guarded."""

        def f(y, z):
            a = y.item()
            y.add_(z)
            return torch.tensor(a + y.item())

        gm = specfx.trace(f, (torch.tensor(2.0), torch.tensor(4.0)), policy=Policy(scalars=True))
        assert [s.value for s in gm.specializations] == [2.0, 6.0]
        assert same_or_guard(gm, f, torch.tensor(2.0), torch.tensor(4.0)) == "equal"
        assert same_or_guard(gm, f, torch.tensor(2.0), torch.tensor(1.0)) == "guard"

    def test_len_after_extend_follows_the_list(self):
        """`len(xs)` before and after `xs.extend(...)` answers as eager; an input list of
        another length is refused at the graph's entry (its structure is checked there)."""

        def f(x, xs):
            n = len(xs)
            xs = list(xs)  # (a write to the caller's list itself is refused: tests/test_input_writes.py)
            xs.extend([x])
            return x * (n + len(xs))

        gm = specfx.trace(f, (torch.ones(2), [1, 2]), policy=Policy(iter=True))
        assert same_or_guard(gm, f, torch.ones(2), [5, 6]) == "equal"
        assert same_or_guard(gm, f, torch.ones(2), [1, 2, 3]) == "guard"
        with pytest.raises(GuardError, match="xs has 3 elements, traced with 2"):
            gm(torch.ones(2), [1, 2, 3])


class TestOptionalInputs:  # class 2
    def test_optional_traced_with_a_tensor_called_with_none(self):
        """`if bias is not None` traced with a tensor raises GuardError on None."""

        def f(x, bias=None):
            return x * 2 if bias is not None else x

        gm = specfx.trace(f, (torch.ones(2), torch.ones(2)))
        assert same_or_guard(gm, f, torch.ones(2), torch.zeros(2)) == "equal"
        with pytest.raises(GuardError, match="bias is None, traced as a Tensor"):
            gm(torch.ones(2), None)


class TestTensorsCreatedInForward:  # classes 3 and 4
    def test_random_noise_is_drawn_on_every_call(self):
        """`x + torch.randn(x.shape)` under SHAPES draws anew on every call."""

        def f(x):
            return x + torch.randn(x.shape)

        gm = specfx.trace(f, torch.ones(3), policy=Policy(shapes=True))
        assert not torch.equal(gm(torch.ones(3)), gm(torch.ones(3)))

    def test_buffer_made_in_forward_does_not_accumulate(self):
        """`pad = torch.zeros(n, 1); pad += ...` starts from zeros on every call."""

        def f(x):
            pad = torch.zeros(x.shape[0], 1)
            pad += x[:, :1]
            return pad

        gm = specfx.trace(f, torch.ones(2, 3), policy=Policy(shapes=True))
        first, second = gm(torch.ones(2, 3)), gm(torch.ones(2, 3))
        assert torch.equal(first, second) and first is not second

    def test_symbolic_sizes_into_factories(self):
        """`torch.ones(x.shape[1] * x.shape[2], 2)` and `torch.tensor(q.size(-1))` stay symbolic."""

        def f(x):
            return torch.ones(x.shape[1] * x.shape[2], 2).sum() + torch.tensor(x.size(-1)) + x

        gm = specfx.trace(f, torch.ones(2, 3, 4))
        assert gm.specializations == []
        for shape in ((2, 3, 4), (5, 1, 7)):
            assert same_or_guard(gm, f, torch.ones(*shape)) == "equal"


    def test_plain_tensor_attributes_are_read_when_the_graph_runs(self):
        """A tensor the model holds as a plain attribute (not a parameter or buffer) is read
        by the graph: written in forward or changed by its owner between calls, the graph's
        answers follow eager's (they were the trace-time value, baked in)."""

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.total = torch.zeros(2)
                self.scale = torch.tensor(2.0)

            def forward(self, x):
                self.total.add_(x)
                return self.total * 1, x + self.scale * 3

        eager, traced = Model(), Model()
        gm = specfx.trace(traced, torch.ones(2))
        assert torch.equal(traced.total, torch.zeros(2))  # tracing wrote nothing
        for step in range(3):
            if step == 2:
                eager.scale.fill_(5.0)
                gm.scale.fill_(5.0)
            want, got = eager(torch.ones(2)), gm(torch.ones(2))
            assert all(torch.equal(w, g) for w, g in zip(want, got))

    def test_tensors_in_containers_the_model_holds_are_read_when_the_graph_runs(self):
        """The same for tensors inside a list or dict attribute (`self.stats[0].add_(x)`)."""

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.stats = [torch.zeros(2)]
                self.tables = {"scale": (torch.ones(2),)}

            def forward(self, x):
                self.stats[0].add_(x)
                return self.stats[0] * 1 + self.tables["scale"][0] * 2

        eager, traced = Model(), Model()
        gm = specfx.trace(traced, torch.ones(2))
        assert torch.equal(traced.stats[0], torch.zeros(2)) and "_tensor_constant0" not in traced.__dict__
        for step in range(3):
            if step == 2:
                eager.tables["scale"][0].fill_(5.0)
                traced.tables["scale"][0].fill_(5.0)  # the graph reads the model's own tensor
            assert torch.equal(gm(torch.ones(2)), eager(torch.ones(2)))

    def test_generator_made_in_forward_is_refused(self):
        """A `torch.Generator()` seeded inside forward restarts on every eager call: refused
        (the graph would continue its draws), with the line and the fix."""

        def f(x):
            generator = torch.Generator().manual_seed(3)
            return x + torch.randn(x.shape, generator=generator)

        with pytest.raises(SpecializationError, match=r"(?s)made inside the traced code.*in __init__.*"
                           r"torch.randn\(x.shape, generator=generator\)"):
            specfx.trace(f, torch.ones(3), policy=Policy(shapes=True))

    def test_generators_that_outlive_a_call_continue_as_in_eager(self):
        """The model's generator, a module global and an argument: the graph draws what eager draws."""
        held = torch.Generator()

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.generators = [torch.Generator()]

            def forward(self, x, generator):
                return (x + torch.randn(x.shape, generator=self.generators[0])
                        + torch.rand(x.shape, generator=held) + torch.randn(x.shape, generator=generator))

        model = Model()
        gm = specfx.trace(model, (torch.ones(3), torch.Generator()), policy=Policy(shapes=True))
        for seed in (1, 2):
            model.generators[0].manual_seed(seed)
            held.manual_seed(seed + 10)
            want = model(torch.ones(3), torch.Generator().manual_seed(seed))
            model.generators[0].manual_seed(seed)
            held.manual_seed(seed + 10)
            assert torch.equal(gm(torch.ones(3), torch.Generator().manual_seed(seed)), want)


class TestCaughtRefusalsAndExceptions:  # classes 5 and 6
    def test_refusal_caught_by_model_code_still_fails_the_trace(self):
        """`try: int(x.sum()) except TypeError` does not trace silently down the fallback."""

        def f(x):
            try:
                n = int(x.sum())
            except TypeError:
                n = 1
            return x * n

        with pytest.raises(SpecializationError, match=r"int\(\) of `x.sum\(\)`"):
            specfx.trace(f, torch.ones(2))

    def test_op_exception_caught_by_model_code_is_refused_with_the_line(self):
        """A fallback taken because an op raised is refused, naming the line."""

        def f(x, y):
            try:
                return x @ y
            except RuntimeError:
                return x * y.sum()

        with pytest.raises(SpecializationError, match="raised RuntimeError") as caught:
            specfx.trace(f, (torch.ones(2, 3), torch.ones(2, 3)))
        assert "return x @ y" in str(caught.value)
        gm = specfx.trace(f, (torch.ones(2, 3), torch.ones(3, 3)))
        assert same_or_guard(gm, f, torch.ones(2, 3), torch.ones(3, 3)) == "equal"


class TestOpsTracedInsideTryBlocks:  # class 6, the op worked on the example
    """An op in a try block that worked on the example: where it raises on an input and the
    model's handler would catch it, the graph raises GuardError (eager takes the fallback)."""

    @staticmethod
    def matmul_or_fallback(x, y):
        try:
            return x @ y
        except RuntimeError:
            return x * y.sum()

    @pytest.mark.parametrize("rows, inner, cols", [(2, 3, 2), (1, 4, 1), (3, 2, 5)])
    def test_graph_equals_eager_or_raises_guard_error(self, rows, inner, cols):
        f = self.matmul_or_fallback
        gm = specfx.trace(f, (torch.randn(2, 3), torch.randn(3, 2)))
        outcome = same_or_guard(gm, f, torch.randn(rows, inner), torch.randn(inner, cols))
        assert outcome == "equal"
        with pytest.raises(GuardError) as caught:
            gm(torch.randn(rows, inner), torch.randn(inner + 1, cols))
        message = str(caught.value)
        assert "`x @ y`" in message and "return x @ y" in message and "RuntimeError" in message
        handler_line = f.__code__.co_firstlineno + 3
        assert f"test_soundness.py:{handler_line}" in message
        assert isinstance(caught.value.__cause__, RuntimeError) and caught.value.kind == "caught"

    def test_the_graph_keeps_its_nodes(self):
        """Nothing is wrapped: FX passes see the op itself."""
        gm = specfx.trace(self.matmul_or_fallback, (torch.randn(2, 3), torch.randn(3, 2)))
        plain = torch.fx.symbolic_trace(lambda x, y: x @ y)
        assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
            n.target for n in plain.graph.nodes if n.op == "call_function"]

    def test_an_error_the_handler_does_not_catch_is_raised_as_eager_raises_it(self):
        def f(x, y):
            try:
                z = x @ y
            except KeyError:
                z = x
            return z * 2

        gm = specfx.trace(f, (torch.randn(2, 3), torch.randn(3, 2)))
        with pytest.raises(RuntimeError) as caught:
            gm(torch.randn(2, 3), torch.randn(2, 3))
        assert not isinstance(caught.value, GuardError)

    def test_ops_after_the_try_block_raise_their_own_error(self):
        def f(x, y):
            try:
                s = x.sum()
            except RuntimeError:
                s = 0
            return x @ y + s

        gm = specfx.trace(f, (torch.randn(2, 3), torch.randn(3, 2)))
        with pytest.raises(RuntimeError) as caught:
            gm(torch.randn(2, 3), torch.randn(2, 3))
        assert not isinstance(caught.value, GuardError)

    def test_a_try_block_in_a_caller_covers_the_ops_of_a_submodule(self):
        class Inner(nn.Module):
            def forward(self, x, y):
                return torch.matmul(x, y) + 1

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()

            def forward(self, x, y):
                try:
                    return self.inner(x, y)
                except (ValueError, RuntimeError):
                    return x

        model = Outer()
        gm = specfx.trace(model, (torch.randn(2, 3), torch.randn(3, 2)))
        assert same_or_guard(gm, model, torch.randn(4, 3), torch.randn(3, 1)) == "equal"
        with pytest.raises(GuardError, match="torch.matmul"):
            gm(torch.randn(2, 3), torch.randn(2, 3))

    def test_try_blocks_two_modules_up_cover_the_ops_below_in_order(self):
        """Handlers are found across nested modules (the frames above each module call are
        walked once, when it is entered): the innermost handler that catches the error is named."""

        class Inner(nn.Module):
            def forward(self, x, y):
                return torch.matmul(x, y) * 2

        class Middle(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()

            def forward(self, x, y):
                try:
                    return self.inner(x, y) + 1
                except KeyError:  # does not catch a shape error
                    return x

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.middle = Middle()

            def forward(self, x, y):
                try:
                    return self.middle(x, y)
                except RuntimeError:
                    return x.sum()

        model = Outer()
        gm = specfx.trace(model, (torch.randn(2, 3), torch.randn(3, 2)))
        assert same_or_guard(gm, model, torch.randn(4, 3), torch.randn(3, 1)) == "equal"
        with pytest.raises(GuardError) as caught:
            gm(torch.randn(2, 3), torch.randn(2, 3))
        handler_line = Outer.forward.__code__.co_firstlineno + 3
        assert f"test_soundness.py:{handler_line}" in str(caught.value) and "torch.matmul" in str(caught.value)

    def test_a_generator_resumed_inside_and_outside_a_try_block(self):
        """A generator's ops take the handlers of wherever it is resumed from: its first op
        (resumed inside the try) is covered, its second (resumed after it) is not."""

        def f(x, y, z):
            def products(pairs):
                for a, b in pairs:
                    yield a @ b

            pairs = products(((x, y), (x, z)))
            try:
                first = next(pairs)
            except RuntimeError:
                first = x.sum()
            second = next(pairs)
            return first, second

        example = (torch.randn(2, 3), torch.randn(3, 2), torch.randn(3, 4))
        gm = specfx.trace(f, example)
        assert all(torch.equal(a, b) for a, b in zip(gm(*example), f(*example)))
        with pytest.raises(GuardError):  # eager takes the fallback
            gm(torch.randn(2, 3), torch.randn(2, 2), torch.randn(3, 4))
        with pytest.raises(RuntimeError) as caught:  # eager raises too
            gm(torch.randn(2, 3), torch.randn(3, 2), torch.randn(2, 4))
        assert not isinstance(caught.value, GuardError)

    def test_a_helper_called_inside_and_outside_a_try_block(self):
        """The same code under and after a try block, called twice from one forward."""

        class Model(nn.Module):
            def helper(self, a, b):
                return torch.matmul(a, b) + 1

            def forward(self, x, y, z):
                try:
                    first = self.helper(x, y)
                except RuntimeError:
                    first = x.sum()
                return first, self.helper(x, z)

        model = Model()
        example = (torch.randn(2, 3), torch.randn(3, 2), torch.randn(3, 4))
        gm = specfx.trace(model, example)
        with pytest.raises(GuardError):
            gm(torch.randn(2, 3), torch.randn(2, 2), torch.randn(3, 4))
        with pytest.raises(RuntimeError) as caught:
            gm(torch.randn(2, 3), torch.randn(3, 2), torch.randn(2, 4))
        assert not isinstance(caught.value, GuardError)

    def test_a_handler_a_helper_rebinds_between_its_ops_is_read_at_each_op(self):
        """The classes an enclosing `except` names are read when each op runs (as eager reads
        them when the error arrives), also for the second op of the same helper call."""

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.errors = (KeyError,)

            def helper(self, x, y):
                first = x + 1  # the helper's first op: the handler above catches KeyError
                self.errors = (RuntimeError,)
                second = x @ y  # now it catches this op's error
                self.errors = (KeyError,)
                return first, second

            def forward(self, x, y):
                try:
                    return self.helper(x, y)
                except self.errors:
                    return x, x

        model = Model()
        gm = specfx.trace(model, (torch.randn(2, 3), torch.randn(3, 2)))
        assert same_or_guard(gm, model, torch.randn(4, 3), torch.randn(3, 1)) == "equal"
        x, y = torch.randn(2, 3), torch.randn(4, 2)
        assert torch.equal(model(x, y)[1], x)  # eager takes the fallback
        model.errors = (KeyError,)
        with pytest.raises(GuardError, match="x @ y"):
            gm(x, y)

    def test_a_handler_a_submodule_rebinds_is_read_at_each_op(self):
        """The clauses above a module call are found once, when it is entered, but the classes
        they name are read at each op: a submodule that rebinds its parent's clause before its
        op makes that op's error one the parent catches, as in eager."""

        class Child(nn.Module):
            def __init__(self, owner):
                super().__init__()
                self.__dict__["owner"] = owner  # (not a submodule: no cycle in the module tree)

            def forward(self, x, y):
                self.owner.errors = (RuntimeError,)
                out = torch.matmul(x, y)
                self.owner.errors = (KeyError,)
                return out

        class Parent(nn.Module):
            def __init__(self):
                super().__init__()
                self.errors = (KeyError,)
                self.child = Child(self)

            def forward(self, x, y):
                try:
                    return self.child(x, y)
                except self.errors:
                    return x

        model = Parent()
        gm = specfx.trace(model, (torch.randn(2, 3), torch.randn(3, 2)))
        x, y = torch.randn(2, 3), torch.randn(4, 2)
        assert torch.equal(model(x, y), x)  # eager takes the fallback
        with pytest.raises(GuardError, match="torch.matmul"):
            gm(x, y)

    def test_a_try_block_around_the_trace_call_is_not_the_models(self):
        def f(x, y):
            return x @ y

        try:
            gm = specfx.trace(f, (torch.randn(2, 3), torch.randn(3, 2)))
        except RuntimeError:  # pragma: no cover - the trace works
            raise
        with pytest.raises(RuntimeError) as caught:
            gm(torch.randn(2, 3), torch.randn(2, 3))
        assert not isinstance(caught.value, GuardError)

    def test_deepcopied_and_saved_graphs_keep_the_guard(self, tmp_path):
        class Mismatch(RuntimeError):  # local: pickled by name, found again or taken as any error
            pass

        def f(x, y):
            try:
                return x @ y
            except (Mismatch, RuntimeError):
                return x.sum()

        gm = specfx.trace(f, (torch.randn(2, 3), torch.randn(3, 2)))
        torch.save(gm, tmp_path / "gm.pt")
        for graph in (copy.deepcopy(gm), torch.load(tmp_path / "gm.pt", weights_only=False)):
            assert torch.equal(graph(torch.ones(2, 3), torch.ones(3, 2)), f(torch.ones(2, 3), torch.ones(3, 2)))
            with pytest.raises(GuardError, match="raised RuntimeError"):
                graph(torch.randn(2, 3), torch.randn(2, 3))


class TestTensorProperties:  # class 7
    def test_grad_is_none_answers_truly(self):
        """`x.grad is None` is True on the example and guarded."""

        def f(x):
            return x + 1 if x.grad is None else x

        gm = specfx.trace(f, torch.ones(2))
        assert [(s.kind, s.expression, s.value) for s in gm.specializations] == [("is_none", "x.grad", True)]
        assert same_or_guard(gm, f, torch.ones(2)) == "equal"
        with_grad = torch.ones(2, requires_grad=True)
        with_grad.grad = torch.full((2,), 5.0)
        assert f(with_grad) is with_grad  # eager takes the other branch
        with pytest.raises(GuardError, match=r"assuming x.grad is None, but for this input x.grad is not None"):
            gm(with_grad)

    def test_layout_and_is_sparse_are_guarded_by_layout(self):
        """`x.is_sparse` is a layout decision."""

        def f(x):
            return x.to_dense() * 2 if x.is_sparse else x * 3

        gm = specfx.trace(f, torch.ones(2))
        assert [str(s.kind) for s in gm.specializations] == ["layout"]
        with pytest.raises(GuardError):
            gm(torch.ones(2).to_sparse())

    def test_parameter_input_and_attributes_are_kept(self):
        """isinstance(x, nn.Parameter) and Python attributes of example tensors survive cloning."""

        def f(x):
            scale = getattr(x, "scale", 1.0)
            return x * scale if isinstance(x, nn.Parameter) else x

        example = nn.Parameter(torch.ones(2))
        example.scale = 3.0
        gm = specfx.trace(f, (example,))
        assert torch.equal(gm(example), f(example))
        with pytest.raises(GuardError):
            gm(torch.ones(2))

    def test_missing_attribute_fallback_is_guarded(self):
        """`getattr(x, "scale", 1.0)` on an example without it guards that inputs lack it too."""

        def f(x):
            return x * getattr(x, "scale", 1.0)

        gm = specfx.trace(f, torch.ones(2))
        other = torch.ones(2)
        other.scale = 5.0
        with pytest.raises(GuardError, match="hasattr"):
            gm(other)

    def test_torch_is_tensor_answers_as_the_value(self):
        """torch.is_tensor(x) is True for a tensor input."""

        def f(x):
            return x + 1 if torch.is_tensor(x) else x

        gm = specfx.trace(f, torch.ones(2))
        assert [(s.kind, s.node, s.value) for s in gm.specializations] == [("type", "x", "torch.Tensor")]
        assert same_or_guard(gm, f, torch.randn(3)) == "equal"
        assert f(3.0) == 3.0  # eager answers False for a number and returns it
        with pytest.raises(GuardError, match=r"x is a float \(3.0\), traced as a Tensor"):
            gm(3.0)


class TestTypeOfTracedValues:  # class 7, type(x)
    """`type(x)` in model code answers as eager (the traced value's class, an input's guarded),
    through the name `type` of the traced code's modules; a `type()` call that ran before specfx
    could answer it is refused, naming the line and the fix."""

    @pytest.mark.parametrize("test", ["type(x) is torch.Tensor", "type(x) is not torch.Tensor",
                                      "type(x) == torch.Tensor", "type(x) in (torch.Tensor, nn.Parameter)",
                                      "type(x).__name__ == 'Tensor'", "type(self.scale) is float",
                                      "type(self.weight) is nn.Parameter", "type(x * 2) is torch.Tensor"])
    def test_compared_type_of_a_traced_value_is_answered_as_eager(self, test):
        source = f"def forward(self, x):\n    if {test}:\n        return x * self.weight\n    return x * 2\n"
        filename = f"<type-check {test}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"torch": torch, "nn": nn, "__name__": "typecheck"}
        exec(compile(source, filename, "exec"), namespace)
        module = type("Model", (nn.Module,), {"forward": namespace["forward"]})()
        module.scale = 2.0
        module.weight = nn.Parameter(torch.full((2,), 3.0))
        gm = specfx.trace(module, torch.ones(2))
        for x in (torch.ones(2), torch.randn(2)):
            assert torch.equal(gm(x), module(x))
        assert "type" not in namespace  # the name is the builtin's again
        if "type(x)" in test:  # the input's exact class is guarded
            with pytest.raises(GuardError, match=r"assuming type\(x\) is torch.Tensor, but for this input type\(x\) "
                                                 r"is torch.nn.parameter.Parameter"):
                gm(nn.Parameter(torch.ones(2)))

    def test_in_a_submodule_after_its_last_op_and_on_python_inputs(self):
        class Sub(nn.Module):
            def forward(self, x):
                y = x + 1
                if type(y) is torch.Tensor:  # no op after it on this branch
                    return y
                return y * 2

        model = nn.Sequential(Sub())
        gm = specfx.trace(model, torch.ones(2))
        assert torch.equal(gm(torch.ones(2)), model(torch.ones(2)))

        def scale(x, n):
            return x * n if type(n) is int else x

        gm = specfx.trace(scale, (torch.ones(2), 3))
        assert torch.equal(gm(torch.ones(2), 3), scale(torch.ones(2), 3))

    def test_type_of_a_class_is_type_while_traced(self):
        def f(x):
            plain = type(nn.Linear) is type and type(type) is type and type(int) == type  # noqa: E721
            return x * 2 if plain and type(x) is torch.Tensor and type(3) is int else x

        gm = specfx.trace(f, torch.ones(2))
        assert torch.equal(gm(torch.ones(2)), f(torch.ones(2)))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))

    def test_type_keeps_its_other_uses_while_traced(self):
        def f(x):
            made = type("Made", (), {"k": 2})  # three arguments: a class
            assert isinstance(int, type) and issubclass(bool, int) and type(3) is int
            return x * made.k if type(x) is torch.Tensor else x

        gm = specfx.trace(f, torch.ones(2))
        assert torch.equal(gm(torch.ones(2)), f(torch.ones(2)))

    def test_a_type_call_run_before_specfx_saw_its_frame_is_refused(self):
        """A helper of a module specfx does not know yet, comparing `type()` before its first op:
        the call ran with the builtin (the proxy's class), so it is refused at its line."""
        source = "def helper(x):\n    if type(x) is torch.Tensor:\n        return x * 2\n    return x - 1\n"
        filename = "<helper module>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        helpers = {"torch": torch, "__name__": "helpers"}
        exec(compile(source, filename, "exec"), helpers)
        helper = helpers["helper"]

        def f(x):
            return helper(x) + 1

        with pytest.raises(SpecializationError, match=r"isinstance\(x, torch.Tensor\)") as caught:
            specfx.trace(f, torch.ones(2))
        assert f"{filename}:2: if type(x) is torch.Tensor" in str(caught.value)

    def test_type_of_untraced_values_and_branches_not_run_are_not_refused(self):
        def f(x, items):
            if type(items) is list:  # a list of tensors is a real list while tracing
                x = x * len(items)
            if not isinstance(x, torch.Tensor):
                if type(x) in (list, tuple):  # not run: x is a tensor
                    x = torch.stack(x)
            return x + 1

        gm = specfx.trace(f, (torch.ones(2), [torch.ones(1)]))
        assert torch.equal(gm(torch.ones(2), [torch.ones(1)]), f(torch.ones(2), [torch.ones(1)]))


class TestIdentityOfTracedNumbers:  # class 8
    """`n is K` and `id(n)` on a traced Python number: the proxy is never the same object
    as the example, so the answer would differ from eager silently; refused with `==` as the fix."""

    SENTINEL = 4

    def test_is_against_a_global_number_is_refused(self):
        def f(x, k):
            return x * (3 if k is TestIdentityOfTracedNumbers.SENTINEL else 5)

        with pytest.raises(SpecializationError, match=r"(?s)`k` is compared by identity.*example 4.*Fix: compare values"):
            specfx.trace(f, (torch.ones(2), 4))

    def test_is_between_two_locals_is_refused(self):
        """Python 3.13 loads both operands with one instruction (`LOAD_FAST_LOAD_FAST`)."""
        def f(x, k):
            sentinel = TestIdentityOfTracedNumbers.SENTINEL
            same = k is sentinel
            return x * (3 if same else 5)

        with pytest.raises(SpecializationError, match=r"(?s)`k` is compared by identity.*example 4"):
            specfx.trace(f, (torch.ones(2), 4))

    def test_id_of_a_shape_is_refused(self):
        def f(x):
            n = x.shape[0]
            return x * (2 if id(n) == id(4) else 3)

        with pytest.raises(SpecializationError, match="compared by identity"):
            specfx.trace(f, torch.ones(4))  # a symbolic size (under SHAPES it is a guarded int)

    def test_is_none_and_equality_stay_answered_from_values(self):
        def f(x, k=None):
            return x * (3 if k is not None and k == 4 else 5)

        gm = specfx.trace(f, (torch.ones(2), 4), policy=Policy(bool=True))
        assert torch.equal(gm(torch.ones(2), 4), f(torch.ones(2), 4))
        with pytest.raises(GuardError):
            gm(torch.ones(2), 5)


class TestHashedPythonValues:  # class 8
    """A traced Python value used as a dict key or set member (`TABLE.get(n)`, `n in {2, 3}`)
    hashes by its value: a decision (SCALARS for data, SHAPES for sizes), guarded."""

    @staticmethod
    def lookup(x, n):
        return x * {2: 10.0, 3: 20.0}.get(n, -1.0)

    @staticmethod
    def member(x, n):
        return x * (2.0 if n in {2, 3} else -1.0)

    @pytest.mark.parametrize("program", ["lookup", "member"])
    @pytest.mark.parametrize("n", [2, 3, 5])
    def test_lookups_equal_eager_or_raise_guard_error(self, program, n):
        fn = getattr(self, program)
        with pytest.raises(SpecializationError, match="hashing `n`"):
            specfx.trace(fn, (torch.ones(2), 2))
        gm = specfx.trace(fn, (torch.ones(2), 2), policy=Policy(scalars=True, bool=True))
        assert same_or_guard(gm, fn, torch.ones(2), n) == ("equal" if n == 2 else "guard")

    def test_a_size_is_a_shapes_decision(self):
        def f(x):
            return x * {2: 1.0, 3: 2.0}.get(x.shape[0], 0.5)

        with pytest.raises(SpecializationError, match=r"hashing `x.shape\[0\]`.*SHAPES"):
            specfx.trace(f, torch.ones(2))
        gm = specfx.trace(f, torch.ones(2), policy=Policy(shapes=True, bool=True))
        assert same_or_guard(gm, f, torch.ones(3)) == "guard"
        assert same_or_guard(gm, f, torch.ones(2)) == "equal"


class TestAmbientState:  # class 9
    def test_branch_on_grad_mode_is_guarded(self):
        """`if torch.is_grad_enabled()` is guarded: under no_grad the graph raises."""

        def f(x):
            return x * 2 if torch.is_grad_enabled() else x

        gm = specfx.trace(f, torch.ones(2))
        assert same_or_guard(gm, f, torch.ones(2)) == "equal"
        with torch.no_grad(), pytest.raises(GuardError, match="is_grad_enabled"):
            gm(torch.ones(2))

    def test_no_grad_region_is_reproduced(self):
        """A `with torch.no_grad()` region inside forward is in the graph."""

        def f(x):
            with torch.no_grad():
                y = x * 2
            return y, x * 3

        x = torch.ones(2, requires_grad=True)
        gm = specfx.trace(f, (x,))
        (y, z), (ey, ez) = gm(x), f(x)
        assert (y.requires_grad, z.requires_grad) == (ey.requires_grad, ez.requires_grad) == (False, True)
        assert torch.is_grad_enabled()

    def test_autocast_region_is_refused(self):
        """`with torch.autocast(...)` inside forward is refused with the fix."""

        def f(x):
            with torch.autocast("cpu"):
                return x @ x

        with pytest.raises(SpecializationError, match="autocast"):
            specfx.trace(f, torch.ones(2, 2))

    def test_autocast_off_region_is_guarded_and_survives_retracing(self):
        """A region that turns autocast off is guarded against calls under autocast, and the
        guard stays in the graph when it is pickled or re-traced."""
        import pickle

        class AutocastOff(nn.Module):
            def forward(self, x):
                with torch.autocast("cpu", enabled=False):
                    return x @ x

        x = torch.ones(2, 2)
        gm = specfx.trace(AutocastOff(), (x,))
        for graph in (gm, pickle.loads(pickle.dumps(gm)), specfx.trace(gm)):
            assert torch.equal(graph(x), AutocastOff()(x))
            assert "specfx_guard_value" in graph.code
            with torch.autocast("cpu"), pytest.raises(GuardError, match="is_autocast_enabled"):
                graph(x)

    def test_branch_on_autocast_state_is_guarded(self):
        """`if torch.is_autocast_enabled(...)` is the trace's answer, guarded: a graph traced
        without autocast raises GuardError when called under it."""

        def f(x):
            return x * 2 if torch.is_autocast_enabled("cpu") else x

        gm = specfx.trace(f, (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), f(torch.ones(2)))
        with torch.autocast("cpu"), pytest.raises(GuardError, match=r"is_autocast_enabled\('cpu'\)"):
            gm(torch.ones(2))

    def test_root_hooks_are_honoured(self):
        """Forward pre-hooks and hooks on the traced module are in the graph."""
        model = nn.Linear(2, 2)
        model.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
        model.register_forward_hook(lambda module, args, out: out + 1)
        gm = specfx.trace(model, torch.ones(1, 2))
        x = torch.randn(3, 2)
        torch.testing.assert_close(gm(x), model(x))


@contextlib.contextmanager
def _default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def _deterministic(mode):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(mode)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@contextlib.contextmanager
def _matmul_precision(precision):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class TestProcessWideSettings:  # class 9, beyond grad mode and autocast
    @pytest.mark.parametrize("f, setting, label", [
        (lambda x: x.to(torch.get_default_dtype()) + 1, lambda: _default_dtype(torch.float64),
         "torch.get_default_dtype()"),
        (lambda x: x.cumsum(0) if torch.are_deterministic_algorithms_enabled() else x * 5,
         lambda: _deterministic(True), "torch.are_deterministic_algorithms_enabled()"),
        (lambda x: x * 2 if torch.is_inference_mode_enabled() else x + 1, lambda: torch.inference_mode(),
         "torch.is_inference_mode_enabled()"),
        (lambda x: x * 2 if torch.get_float32_matmul_precision() == "highest" else x + 1,
         lambda: _matmul_precision("high"), "torch.get_float32_matmul_precision()"),
        (lambda x: x * 2 if torch.is_anomaly_enabled() else x + 1, lambda: torch.autograd.set_detect_anomaly(True),
         "torch.is_anomaly_enabled()"),
    ])
    def test_a_setting_read_in_forward_is_guarded(self, f, setting, label):
        """The trace's answer, guarded: under the setting it was traced with the graph is eager;
        under another it raises GuardError naming the getter."""
        gm = specfx.trace(f, (torch.arange(3.0),))
        assert torch.equal(gm(torch.arange(3.0)), f(torch.arange(3.0)))
        with setting():
            with pytest.raises(GuardError, match=re.escape(label)):
                gm(torch.arange(3.0))

    def test_the_getters_are_torchs_list(self):
        """Every getter of torch's list of functions that take no tensors is covered."""
        from specfx._capture.ambient import AMBIENT_GETTERS

        ignored = {f.__name__ for f in torch.overrides.get_ignored_functions() if getattr(f, "__module__", "") == "torch"}
        assert {"get_default_dtype", "are_deterministic_algorithms_enabled", "is_inference_mode_enabled",
                "get_autocast_dtype", "get_default_device"} <= set(AMBIENT_GETTERS)
        assert set(AMBIENT_GETTERS) <= ignored


class TestRandomness:  # class 10
    def test_layer_drop_decision_is_a_guarded_bool(self):
        """`if torch.rand([]) < p` is a BOOL decision on a drawn value: refused, or guarded."""

        def f(x):
            if torch.rand([]) < 0.5:
                return x
            return x * 2

        with pytest.raises(SpecializationError, match="BOOL"):
            specfx.trace(f, torch.ones(2))
        gm = specfx.trace(f, torch.ones(2), policy=Policy(bool=True))
        (drawn_low,) = [s.value for s in gm.specializations]
        traced_branch = (lambda x: x) if drawn_low else (lambda x: x * 2)
        # each call draws anew: the traced branch when the draw agrees, GuardError when not
        outcomes = {same_or_guard(gm, traced_branch, torch.ones(2)) for _ in range(40)}
        assert outcomes == {"equal", "guard"}

    @pytest.mark.parametrize("control", [
        "torch.manual_seed(0)", "torch.random.manual_seed(0)", "torch.set_rng_state(torch.get_rng_state())",
        "torch.initial_seed()", "torch.seed()",
    ])
    def test_rng_control_in_forward_is_refused(self, control):
        """The graph records draws, not the state they start from: seeding or replaying in forward is refused
        (and the trace leaves the RNG as it was)."""
        namespace = {"torch": torch}
        exec(f"def f(x):\n    {control}\n    return x + torch.randn(x.shape)\n", namespace)
        state = torch.get_rng_state()
        with pytest.raises(SpecializationError, match=r"(?s)inside the traced code: a graph records random draws, "
                                                      r"not the generator state.*Fix: seed or set the generator"):
            specfx.trace(namespace["f"], (torch.ones(2),))
        assert torch.equal(torch.get_rng_state(), state)

    def test_fork_rng_in_forward_is_refused(self):
        def f(x):
            with torch.random.fork_rng():
                torch.manual_seed(5)
                noise = torch.rand(x.shape)
            return x + noise

        with pytest.raises(SpecializationError, match=r"torch.random.fork_rng\(\) inside the traced code"):
            specfx.trace(f, (torch.ones(2),))

    @pytest.mark.parametrize("control", [
        "self.gen.manual_seed(7)", "self.gen.seed()", "self.gen.set_state(self.gen.get_state())",
        "GEN.manual_seed(7)", "gen = self.gen\n        gen.manual_seed(7)", "self.gen.initial_seed()",
    ])
    def test_control_of_a_held_generator_in_forward_is_refused(self, control):
        """A generator the model (or its module) holds, seeded or replayed in forward: the graph
        would keep drawing from where the last call left off, eager starts again; refused at the line,
        and the trace leaves the generator as it was."""
        source = (f"def forward(self, x):\n        {control}\n"
                  f"        return x + torch.randn(x.shape, generator=self.gen)\n")
        filename = f"<generator {control.splitlines()[-1].strip()}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        module = type("Noisy", (nn.Module,), {"forward": namespace["forward"]})()
        module.gen = namespace["GEN"] = torch.Generator().manual_seed(1)
        state = module.gen.get_state()
        line = 3 if "\n" in control else 2
        with pytest.raises(SpecializationError, match=r"(?s)inside the traced code: a graph records the draws from a "
                                                      r"generator, not its seeding.*Fix: seed the generator") as caught:
            specfx.trace(module, torch.ones(2), policy=Policy(specfx.Specialize.ALL))
        assert f"{filename}:{line}: {control.splitlines()[-1].strip()}" in str(caught.value)
        assert torch.equal(module.gen.get_state(), state)

    def test_a_helper_seeding_the_generator_it_is_given_is_refused(self):
        def noise(generator, shape):
            generator.manual_seed(0)
            return torch.randn(shape, generator=generator)

        class Noisy(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen = torch.Generator()

            def forward(self, x):
                return x + noise(self.gen, x.shape)

        with pytest.raises(SpecializationError, match=r"generator.manual_seed\(\) inside the traced code"):
            specfx.trace(Noisy(), torch.ones(2))

    def test_a_generator_passed_in_is_seeded_by_the_graph_as_by_eager(self):
        """A generator that is an input is the graph's input too: its manual_seed is a graph call,
        so graph and eager draw the same numbers and leave it in the same state."""

        def f(x, generator):
            generator.manual_seed(3)
            return x + torch.randn(x.shape, generator=generator)

        gm = specfx.trace(f, (torch.ones(2), torch.Generator()))
        eager_generator, graph_generator = torch.Generator(), torch.Generator()
        for _ in range(2):
            assert torch.equal(gm(torch.ones(2), graph_generator), f(torch.ones(2), eager_generator))
        assert torch.equal(graph_generator.get_state(), eager_generator.get_state())

    @pytest.mark.parametrize("control", ["torch.cuda.manual_seed(0)", "torch.cuda.manual_seed_all(0)",
                                         "torch.cuda.seed()", "torch.mps.manual_seed(0)"])
    def test_accelerator_rng_control_in_forward_is_refused(self, control):
        namespace = {"torch": torch}
        exec(f"def f(x):\n    {control}\n    return x + torch.randn(x.shape)\n", namespace)
        with pytest.raises(SpecializationError, match=re.escape(control.split("(")[0] + "() inside the traced code")):
            specfx.trace(namespace["f"], (torch.ones(2),))

    @pytest.mark.parametrize("draw", [
        "random.choice([1, 2])", "numpy.random.rand()", "numpy.random.randn()", "numpy.random.randint(0, 3)",
        "numpy.random.normal()", "numpy.random.uniform()",
    ])
    def test_numpy_draws_and_python_picks_are_refused(self, draw):
        """numpy's random draws and Python's picks from a sequence in forward are refused (the
        graph would freeze the number drawn), naming the call, and neither generator is advanced."""
        numpy = pytest.importorskip("numpy")
        namespace = {"random": random, "numpy": numpy}
        exec(f"def f(x):\n    return x * {draw}\n", namespace)
        python_state, numpy_state = random.getstate(), numpy.random.get_state()
        name = draw.split("(")[0]
        with pytest.raises(SpecializationError, match=re.escape(f"{name}()")):
            specfx.trace(namespace["f"], torch.ones(2))
        assert random.getstate() == python_state
        after = numpy.random.get_state()
        assert after[0] == numpy_state[0] and (after[1] == numpy_state[1]).all() and after[2:] == numpy_state[2:]

    @pytest.mark.parametrize("draw", ["random.random()", "random.uniform(0, 1)", "random.randint(0, 3)",
                                      "random.gauss(0, 1)"])
    def test_python_number_draws_are_drawn_by_the_graph(self, draw):
        """A number drawn from Python's random is drawn again by the graph at every call: equal
        to eager from the same generator state, which both advance alike; tracing advances none."""
        namespace = {"random": random}
        exec(f"def f(x):\n    return x * {draw}\n", namespace)
        state = random.getstate()
        gm = specfx.trace(namespace["f"], torch.ones(2))
        assert random.getstate() == state
        random.seed(3)
        graph_out, after_graph = gm(torch.ones(2)), random.getstate()
        random.seed(3)
        eager_out, after_eager = namespace["f"](torch.ones(2)), random.getstate()
        assert torch.equal(graph_out, eager_out) and after_graph == after_eager


class TestPolicyExactly:  # class 11
    def test_int_of_random_data_needs_scalars(self):
        """int() of `torch.randint(0, 10, (x.size(0),))` data is SCALARS, not SHAPES."""

        def f(x):
            return x * int(torch.randint(0, 10, (x.size(0),)).sum())

        with pytest.raises(SpecializationError, match="SCALARS"):
            specfx.trace(f, torch.ones(3), policy=Policy(shapes=True))

    def test_submodule_under_two_names_honours_scopes_for_both(self):
        """A submodule registered twice matches `scopes` through its second name too."""

        class Gate(nn.Module):
            def forward(self, x):
                return x if x.sum() > 0 else -x

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.first = Gate()
                self.second = self.first

            def forward(self, x):
                return self.second(x)

        gm = specfx.trace(Model(), torch.ones(2), policy=Policy(scopes={"second": Policy(bool=True)}))
        assert [str(s.kind) for s in gm.specializations] == ["bool"]

    def test_specialize_in_a_suspended_generator_does_not_leak(self):
        """`with specialize(bool=True)` inside a generator that stays suspended grants nothing to its caller."""

        def chunks(x):
            with specfx.specialize(bool=True):
                yield x

        def f(x):
            (y,) = [next(chunks(x))]
            return y if y.sum() > 0 else -y

        with pytest.raises(SpecializationError, match="BOOL"):
            specfx.trace(f, torch.ones(2))


class TestBuiltinsOfTracedValues:  # builtins answered as the value, or recorded
    def test_callable_answers_as_the_value(self):
        """`callable(x)` is False for a tensor (transformers' torch_compilable_check asks it of every
        input), True for a traced value that is callable."""
        def f(x, act=None):
            if callable(x):
                return x
            return x.relu() if callable(x.relu) else x

        gm = specfx.trace(f, (torch.randn(3),))
        x = torch.randn(3)
        assert torch.equal(gm(x), f(x))

    @pytest.mark.parametrize("policy", [Policy(), Policy(specfx.Specialize.ALL)])
    def test_divmod_and_round_of_sizes(self, policy):
        """Without SHAPES the quotient, remainder and rounded size stay symbolic (nodes calling the
        builtin); with it they are guarded sizes."""
        def f(x):
            rows, extra = divmod(x.shape[-1], 2)
            return x[..., :rows] * (extra + 1) * round(x.shape[0] / 3)

        gm = specfx.trace(f, (torch.ones(4, 5),), policy=policy)
        for x in (torch.ones(4, 5), torch.ones(5, 7)):
            assert same_or_guard(gm, f, x) == ("guard" if policy.flags and x.shape != (4, 5) else "equal")

    def test_round_of_a_scalar_and_reflected_divmod(self):
        def f(x):
            q, r = divmod(7, x.shape[0])
            return x * q + r + round(x.sum().item(), 1)

        gm = specfx.trace(f, (torch.ones(3),))
        for x in (torch.ones(3), torch.full((2,), 0.37)):
            assert same_or_guard(gm, f, x) == "equal"

    def test_class_attribute_read_answers_as_the_value_and_is_guarded(self):
        """`x.__class__ is torch.Tensor` in model code reads the value's class (guarded by exact class)."""
        def f(x):
            return x * 2 if x.__class__ is torch.Tensor else x

        gm = specfx.trace(f, (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))
        with pytest.raises(GuardError):
            gm(nn.Parameter(torch.ones(2)))


class TestCondOnData:
    """`torch.cond(pred, true_fn, false_fn, operands)` on traced values is a decision on `pred`, as
    `if pred:` is: refused without BOOL (naming the line), guarded with it."""

    @staticmethod
    def f(x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: (t - 1).sin(), (x,))

    def test_refused_without_the_flag_at_the_line(self):
        with pytest.raises(SpecializationError, match=r"(?s)BOOL.*return torch.cond\(x.sum\(\) > 0"):
            specfx.trace(self.f, torch.ones(3))

    def test_granted_it_takes_eager_branch_or_raises_guard_error(self):
        """(Eager compiles torch.cond at every call, slowly: one eager call.)"""
        gm = specfx.trace(self.f, -torch.ones(3), policy=Policy(bool=True))
        assert same_or_guard(gm, self.f, torch.tensor([-2.0, -0.5, 1.0])) == "equal"
        with pytest.raises(GuardError, match=r"x.sum\(\) > 0"):
            gm(torch.ones(3))
