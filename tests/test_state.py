"""Tracing never changes the user's world: parameters, buffers, ``training``
flags, hooks, example inputs, RNG states and torch.fx's global patches are as
they were after ``specfx.trace``, whether it succeeds, fails midway, or runs
``check_inputs``."""

from __future__ import annotations

import collections.abc
import copy
import math
import random
import warnings
from math import sqrt

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy

ORIGINAL_CALL = nn.Module.__call__
ORIGINAL_GETATTR = nn.Module.__getattr__
ORIGINAL_SQRT = sqrt

# The branch at the end of each model's forward: allowed, the trace succeeds; refused
# (no BOOL), it fails with SpecializationError after every other op has already run.
OUTCOMES = ["succeeds", "fails_midway"]


def branch(y):
    if y.sum() > -1e9:
        return y * 2
    return y


def run_trace(outcome, model, example_inputs, example_kwargs=None, **options):
    """Trace ``model``; with "fails_midway" the trace is expected to raise SpecializationError."""
    if outcome == "succeeds":
        return specfx.trace(model, example_inputs, example_kwargs, policy=Policy(bool=True), **options)
    with pytest.raises(specfx.SpecializationError):
        specfx.trace(model, example_inputs, example_kwargs, policy=Policy(), **options)
    return None


@pytest.fixture(params=OUTCOMES)
def outcome(request):
    return request.param


def snapshot(model):
    return {name: value.detach().clone() for name, value in model.state_dict(keep_vars=True).items()}


def assert_state_equal(model, before):
    after = model.state_dict(keep_vars=True)
    assert after.keys() == before.keys()
    changed = [name for name, value in after.items() if not torch.equal(value, before[name])]
    assert changed == []


# -- models ----------------------------------------------------------------------------------------


class Normed(nn.Module):
    """A train-mode BatchNorm whose example run updates its running statistics."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return branch(self.bn(self.proj(x)))


class Accumulates(nn.Module):
    """Writes to one of its own buffers in place, like a running statistic."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("total", torch.zeros(4))
        self.register_buffer("steps", torch.tensor(0))

    def forward(self, x):
        self.total.add_(x.sum(0))
        self.steps += 1
        return branch(self.proj(x))


class WritesItsInput(nn.Module):
    def forward(self, x, pair):
        x.add_(1)
        pair[0].mul_(3)
        return branch(x + pair[0] + pair[1])


class WritesItsParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.counter = nn.Parameter(torch.zeros(4), requires_grad=False)

    def forward(self, x):
        with torch.no_grad():
            self.weight.add_(1)
        self.counter.add_(1)
        return branch(x * self.weight)


class TogglesModes(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.head = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))

    def forward(self, x):
        self.drop.eval()
        self.head.train()
        self.train(False)
        return branch(self.head(self.drop(x)))


@torch.fx.wrap
def scaled_by_python_draw(noise):
    # Python's random, drawn by the graph on every call (a draw in forward itself is refused)
    return noise * random.random()


class Random(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        noise = scaled_by_python_draw(torch.rand(4))
        return branch(self.drop(x) + noise)


class TakesKeywords(nn.Module):
    def forward(self, x, **extra):
        scale = extra.pop("scale")
        scale.mul_(2)
        extra["added"] = scale
        return branch(x * scale * sqrt(2.0))


# -- tests -----------------------------------------------------------------------------------------



class TestParametersAndBuffers:
    def test_state_dict_bit_identical(self, outcome):
        """Every parameter and buffer is bit-identical afterwards, including a buffer the forward writes in place."""
        model = Accumulates()
        before = snapshot(model)
        run_trace(outcome, model, torch.randn(3, 4))
        assert_state_equal(model, before)

    @pytest.mark.parametrize(
        "buffer",
        [
            "running_mean",
            "running_var",
            "num_batches_tracked",
        ],
    )
    def test_batchnorm_statistics_unchanged(self, outcome, buffer):
        """A train-mode BatchNorm's running statistics and batch counter are as before the trace."""
        model = Normed().train()
        before = getattr(model.bn, buffer).clone()
        run_trace(outcome, model, torch.randn(8, 4) + 3)
        assert torch.equal(getattr(model.bn, buffer), before)

    def test_in_place_write_to_own_parameter_is_undone(self, outcome):
        """Parameters the forward writes to in place (under no_grad or not requiring grad) are restored."""
        model = WritesItsParameter()
        before = snapshot(model)
        run_trace(outcome, model, torch.randn(3, 4))
        assert_state_equal(model, before)
        assert model.weight.requires_grad and not model.counter.requires_grad

    def test_parameters_stay_the_same_objects(self, outcome):
        """The model's Parameter objects are not replaced (optimizers holding them keep working)."""
        model = WritesItsParameter()
        params = dict(model.named_parameters())
        run_trace(outcome, model, torch.randn(3, 4))
        assert all(p is params[name] for name, p in model.named_parameters())


class TestExampleInputs:
    def test_in_place_ops_leave_examples_unchanged(self, outcome):
        """A forward that writes to its inputs in place (also inside a tuple) leaves the example tensors as they were."""
        x, pair = torch.randn(3, 4), (torch.randn(3, 4), torch.randn(3, 4))
        originals = [x.clone(), pair[0].clone(), pair[1].clone()]
        run_trace(outcome, WritesItsInput(), (x, pair))
        assert all(torch.equal(a, b) for a, b in zip([x, *pair], originals))

    def test_example_kwargs_dict_not_mutated(self, outcome):
        """A forward that pops from, adds to and writes through `**kwargs` leaves the example_kwargs dict alone."""
        scale = torch.full((4,), 1.5)
        example_kwargs = {"scale": scale}
        run_trace(outcome, TakesKeywords(), (torch.randn(3, 4),), example_kwargs)
        assert list(example_kwargs) == ["scale"]
        assert example_kwargs["scale"] is scale
        assert torch.equal(scale, torch.full((4,), 1.5))

    def test_graph_from_in_place_model_matches_eager(self):
        """The graph traced from clones still performs the in-place ops on the caller's tensors, as eager does."""
        gm = specfx.trace(WritesItsInput(), (torch.randn(3, 4), (torch.randn(3, 4), torch.randn(3, 4))),
                          policy=Policy(bool=True))
        x, pair = torch.zeros(3, 4), (torch.ones(3, 4), torch.ones(3, 4))
        gm(x, pair)
        assert torch.equal(x, torch.ones(3, 4)) and torch.equal(pair[0], torch.full((3, 4), 3.0))


class TestTrainingFlags:
    @pytest.mark.parametrize("root_training", [True, False])
    def test_flags_unchanged(self, outcome, root_training):
        """`training` of every submodule is as before, also when forward toggles them with eval()/train()
        (which the graph cannot repeat: a trace that gets to its end is refused, naming the flags)."""
        model = TogglesModes().train(root_training)
        model.head[0].eval()
        before = [(name, m.training) for name, m in model.named_modules()]
        if outcome == "succeeds" and root_training:  # (from eval, forward's toggles end where they began)
            with pytest.raises(specfx.SpecializationError, match=r"forward changes the model's state \(.*drop\.training"):
                specfx.trace(model, torch.randn(3, 4), policy=Policy(bool=True))
        else:
            run_trace(outcome, model, torch.randn(3, 4))
        assert [(name, m.training) for name, m in model.named_modules()] == before


class TestHooks:
    def test_hooks_are_the_same_objects(self, outcome):
        """Forward, forward-pre and backward hooks on the model and its submodules are untouched."""
        model = Normed()
        model.register_forward_hook(lambda module, args, out: None)
        model.register_forward_pre_hook(lambda module, args: None)
        model.bn.register_forward_hook(lambda module, args, out: None)
        model.proj.register_full_backward_hook(lambda module, grad_in, grad_out: None)

        def hooks():
            return [
                (name, table, key, hook)
                for name, m in model.named_modules()
                for table in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks")
                for key, hook in getattr(m, table).items()
            ]

        before = hooks()
        run_trace(outcome, model, torch.randn(8, 4))
        after = hooks()
        assert len(before) == 4
        assert [entry[:3] for entry in after] == [entry[:3] for entry in before]
        assert all(a[3] is b[3] for a, b in zip(after, before))


class TestRandomState:
    def test_rng_states_unchanged(self, outcome):
        """torch's and Python's global RNG states are unchanged by a train-mode Dropout and random draws in forward."""
        model, x = Random().train(), torch.randn(3, 4)
        torch_state, python_state = torch.get_rng_state(), random.getstate()
        run_trace(outcome, model, x)
        assert torch.equal(torch.get_rng_state(), torch_state)
        assert random.getstate() == python_state


class TestFxPatches:
    def test_no_patches_left_behind(self, outcome):
        """nn.Module.__call__/__getattr__, autowrapped math functions and the FX tracing flag are restored."""
        run_trace(outcome, TakesKeywords(), (torch.randn(3, 4),), {"scale": torch.ones(4)})
        assert nn.Module.__call__ is ORIGINAL_CALL
        assert nn.Module.__getattr__ is ORIGINAL_GETATTR
        assert sqrt is ORIGINAL_SQRT is math.sqrt
        assert not torch.fx._symbolic_trace.is_fx_tracing()

    def test_model_runs_eagerly_afterwards(self, outcome):
        """After a trace the model runs eagerly with no tracing machinery in the way."""
        model = Normed().eval()
        expected = model(torch.ones(3, 4))
        run_trace(outcome, model, torch.randn(3, 4))
        out = model(torch.ones(3, 4))
        assert type(out) is torch.Tensor
        assert torch.equal(out, expected)


class DrawsRandomly(nn.Module):
    """Consumes torch's RNG (train-mode Dropout) and Python's (a discarded draw) without breaking eager == traced."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = scaled_by_python_draw(x) * 0 + x
        return self.drop(x) * 2


class TestCheckInputs:
    def test_example_and_check_inputs_unchanged(self):
        """check_inputs runs clone their inputs: a forward writing in place changes neither examples nor check inputs."""
        example = (torch.randn(3, 4), (torch.randn(3, 4), torch.randn(3, 4)))
        entries = [(torch.randn(5, 4), (torch.randn(5, 4), torch.randn(5, 4)))]
        originals = copy.deepcopy([example, *entries])
        specfx.trace(WritesItsInput(), example, policy=Policy(bool=True), check_inputs=entries)
        for (x, pair), (x0, pair0) in zip([example, *entries], originals):
            assert torch.equal(x, x0) and torch.equal(pair[0], pair0[0]) and torch.equal(pair[1], pair0[1])

    def test_rng_states_unchanged(self):
        """check_inputs runs of a model drawing random numbers leave torch's and Python's RNG states as they were."""
        model, example, checks = DrawsRandomly().train(), torch.randn(3, 4), [torch.randn(5, 4), torch.randn(2, 4)]
        torch_state, python_state = torch.get_rng_state(), random.getstate()
        specfx.trace(model, example, check_inputs=checks)
        assert torch.equal(torch.get_rng_state(), torch_state)
        assert random.getstate() == python_state

    def test_eager_and_graph_draw_alike_from_a_generator_the_model_holds(self):
        """check_inputs compares bit for bit: both runs draw the same numbers, and the
        model's generator is not advanced by either."""

        class OwnNoise(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen = torch.Generator().manual_seed(5)
                self.drop = nn.Dropout(0.5)

            def forward(self, x):
                return self.drop(x) + torch.randn(x.shape, generator=self.gen)

        model, example, checks = OwnNoise().train(), torch.randn(3, 4), [torch.randn(5, 4), torch.randn(2, 4)]
        state, default = model.gen.get_state(), torch.get_rng_state()
        specfx.trace(model, example, check_inputs=checks)
        assert torch.equal(model.gen.get_state(), state) and torch.equal(torch.get_rng_state(), default)

    def test_training_flags_unchanged(self):
        """A forward that toggles eval()/train() is refused (the graph would not repeat the toggles), and
        every `training` flag is as it was."""
        model = TogglesModes().train()
        before = [m.training for m in model.modules()]
        with pytest.raises(specfx.SpecializationError, match=r"drop\.training \(bound to a bool\)"):
            specfx.trace(model, torch.randn(3, 4), policy=Policy(bool=True), check_inputs=[torch.randn(5, 4)])
        assert [m.training for m in model.modules()] == before

    def test_buffers_written_in_place_unchanged(self):
        """check_inputs runs of a forward that updates its own buffers leave them as before."""
        model = Accumulates()
        before = snapshot(model)
        specfx.trace(model, torch.randn(3, 4), policy=Policy(bool=True), check_inputs=[torch.randn(5, 4)])
        assert_state_equal(model, before)

    def test_batchnorm_statistics_unchanged(self):
        """check_inputs runs the eager train-mode model, yet its BatchNorm statistics are as before."""
        model = Normed().train()
        before = snapshot(model)
        specfx.trace(model, torch.randn(8, 4), policy=Policy(bool=True), check_inputs=[torch.randn(6, 4) + 3])
        assert_state_equal(model, before)

    def test_in_place_write_to_own_parameter_is_undone(self):
        """check_inputs runs of a forward that writes to its own parameter leave the parameter as before, silently."""

        class Counts(nn.Module):
            def __init__(self):
                super().__init__()
                self.counter = nn.Parameter(torch.zeros(4), requires_grad=False)

            def forward(self, x):
                self.counter.add_(1)
                return x * 2

        model = Counts()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            specfx.trace(model, torch.randn(3, 4), check_inputs=[torch.randn(5, 4)])
        assert [str(w.message) for w in caught] == []
        assert torch.equal(model.counter, torch.zeros(4))


# -- copy-on-write: the user's objects are never written -------------------------------------------


class KeepsHistory(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []
        self.cache = {"seen": [0]}

    def forward(self, x):
        self.history.append(x)
        self.cache["last"] = x
        self.cache["seen"].append(1)
        return x + 1


class HalvesThroughData(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        self.w.data.mul_(0.5)
        return x * self.w


class TogglesGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        self.w.requires_grad_(False)
        return x * self.w


class FreezesItsLinear(nn.Module):
    """Freezes its parameters from forward through the parameters themselves (not values
    the trace reads, which an in-place op would write on the trace's copy): the trace
    cannot redirect these writes, so it must put them back."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        for p in self.lin.parameters():
            p.requires_grad = False
            p.grad = None
        return self.lin(x)


class OwnGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x):
        return x + torch.rand(4, generator=self.generator)


class NumpyNoise(nn.Module):
    def forward(self, x):
        import numpy

        return x + float(numpy.random.rand())


class Rewires(nn.Module):
    """forward deletes, adds and rebinds attributes, submodules, parameters and buffers."""

    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.flag = True
        self.inner = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.ones(4))
        self.register_buffer("b", torch.zeros(4))

    def forward(self, x):
        del self.flag
        self.inner = nn.Identity()
        self.w = None
        del self.b
        self.register_buffer("fresh", None)
        self.added = 1
        return x * self.scale


def tables(model: nn.Module):
    """Every module's attribute, parameter, buffer and submodule tables: keys in order, objects by identity."""
    return [(name, [(list(t), [id(v) for v in t.values()])
                    for t in (m.__dict__, m._parameters, m._buffers, m._modules)])
            for name, m in model.named_modules()]


class TestCopyOnWrite:
    def test_deleted_added_and_rebound_entries_are_put_back_in_order(self):
        model = Rewires()
        before = tables(model)
        with pytest.raises(specfx.SpecializationError, match=r"flag \(deleted\); w \(a parameter replaced\)"):
            specfx.trace(model, (torch.ones(4),))
        assert tables(model) == before

    def test_python_containers_on_the_model_are_put_back_with_a_warning(self):
        model = KeepsHistory()
        history, cache, seen = model.history, model.cache, model.cache["seen"]
        with pytest.raises(specfx.SpecializationError, match=r"history \(changed in place\)"):
            specfx.trace(model, (torch.ones(4),))
        assert model.history is history and history == []
        assert model.cache is cache and list(cache) == ["seen"] and seen == [0]

    def test_a_write_through_data_reaches_a_copy_and_later_reads_see_it(self):
        model = HalvesThroughData()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gm = specfx.trace(model, (torch.ones(4),))
        assert torch.equal(model.w.detach(), torch.ones(4)) and model.w._version == 0
        # the graph halves the weight on each call, as eager does
        assert torch.equal(gm(torch.ones(4)), torch.full((4,), 0.5))

    def test_requires_grad_set_in_place_lands_on_the_traces_copy(self):
        """`self.w.requires_grad_(False)` is an in-place op on a value the trace read: it
        writes the trace's copy, so the user's parameter is never touched."""
        model = TogglesGrad()
        grad = torch.zeros(4)
        model.w.grad = grad
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing to put back, so nothing to report
            specfx.trace(model, (torch.ones(4),))
        assert model.w.requires_grad and model.w.grad is grad

    def test_requires_grad_and_grad_set_on_the_parameters_are_put_back(self):
        """A forward that freezes the parameters it iterates over (and drops their grads)
        changes the user's parameters themselves: specfx puts the flags and the grads back
        and says so."""
        model = FreezesItsLinear()
        grads = [torch.full_like(p, 3.0) for p in model.parameters()]
        for param, grad in zip(model.parameters(), grads):
            param.grad = grad
        changed = "; ".join(rf"lin\.{p}\.{a} \(changed in place\)" for p in ("weight", "bias") for a in ("requires_grad", "grad"))
        with pytest.raises(specfx.SpecializationError, match=rf"forward changes the model's state \({changed}\)"):
            specfx.trace(model, (torch.ones(1, 2),))
        assert [p.requires_grad for p in model.parameters()] == [True, True]
        assert all(p.grad is grad for p, grad in zip(model.parameters(), grads))

    def test_a_generator_held_by_the_model_is_not_advanced(self):
        model = OwnGenerator()
        state = model.generator.get_state()
        specfx.trace(model, (torch.ones(4),))
        assert torch.equal(model.generator.get_state(), state)

    def test_numpy_global_rng_is_not_advanced(self):
        numpy = pytest.importorskip("numpy")
        numpy.random.seed(0)
        state = numpy.random.get_state()
        # a numpy draw in forward is refused (the graph would freeze it); the state is still kept
        with pytest.raises(specfx.SpecializationError, match=r"numpy.random.rand\(\)"):
            specfx.trace(NumpyNoise(), (torch.ones(4),), policy=Policy(scalars=True))
        after = numpy.random.get_state()
        assert after[0] == state[0] and (after[1] == state[1]).all() and after[2:] == state[2:]

    @pytest.mark.parametrize("wrap", ["dataclass", "namespace", "object", "slots", "nested"])
    def test_example_inputs_in_any_container_are_not_written(self, wrap):
        import dataclasses
        import types

        @dataclasses.dataclass
        class Batch:
            x: torch.Tensor

        class Holder:
            def __init__(self, x):
                self.x = x

        class Slotted:
            __slots__ = ("x", "__private")

            def __init__(self, x):
                self.x = x
                self.__private = [x]

        @dataclasses.dataclass
        class Outer:
            inner: dict

            @property
            def x(self):
                return self.inner["k"][0]

        make = {"dataclass": Batch, "namespace": lambda x: types.SimpleNamespace(x=x), "object": Holder,
                "slots": Slotted, "nested": lambda x: Outer({"k": [x]})}[wrap]

        def forward(b):
            b.x.add_(1)
            return b.x * 2

        x = torch.zeros(3)
        batch = make(x)
        specfx.trace(forward, (batch,))
        assert batch.x is x and torch.equal(x, torch.zeros(3)) and x._version == 0

    def test_a_plain_tensor_attribute_written_in_place_is_not_written(self):
        class Accumulates(nn.Module):
            def __init__(self):
                super().__init__()
                self.total = torch.zeros(2)  # neither a parameter nor a buffer

            def forward(self, x):
                self.total.add_(x)
                return x * 2

        model = Accumulates()
        specfx.trace(model, (torch.ones(2),))
        assert torch.equal(model.total, torch.zeros(2)) and model.total._version == 0

    def test_writes_through_data_items_init_and_copy_reach_copies(self):
        class WritesThreeWays(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(3))
                self.v = nn.Parameter(torch.ones(3))

            def forward(self, x):
                self.w.data[0] = 5.0
                nn.init.zeros_(self.v)
                self.w.data.copy_(self.w.data * 2)
                return x * self.w + self.v

        model = WritesThreeWays()
        gm = specfx.trace(model, (torch.ones(3),))
        assert torch.equal(model.w.detach(), torch.ones(3)) and torch.equal(model.v.detach(), torch.ones(3))
        expected = WritesThreeWays()(torch.ones(3))
        assert torch.equal(gm(torch.ones(3)), expected)

    def test_batchnorm_buffers_are_not_written_at_all(self):
        model = Normed().train()
        versions = {name: b._version for name, b in model.named_buffers()}
        specfx.trace(model, (torch.randn(8, 4),), policy=Policy(bool=True))
        assert {name: b._version for name, b in model.named_buffers()} == versions

    def test_a_leaf_reads_what_the_trace_wrote_to_its_tensors_before(self):
        """A torch leaf called after forward wrote its parameter (through ``.data``) or its
        buffer computes the value eager computes (it ran on the unwritten tensors, so the
        decision on it failed its own guard on the example input)."""

        class WritesThenCalls(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(2, 2, bias=False)
                nn.init.ones_(self.linear.weight)
                self.norm = nn.BatchNorm1d(2).eval()

            def forward(self, x):
                self.linear.weight.data.mul_(2)
                self.norm.running_mean.add_(1)
                y = self.linear(x) + self.norm(x)
                return y * 10 if y.sum() > 6 else y

        model, x = WritesThenCalls(), torch.ones(1, 2)
        before = snapshot(model)
        gm = specfx.trace(model, (x,), policy=Policy(bool=True))
        assert_state_equal(model, before)
        assert torch.allclose(gm(x), WritesThenCalls()(x))

    def test_user_modules_inside_a_torch_leaf_and_hooks_of_torch_leaves_write_copies(self):
        """Inside a torch container traced as a leaf, a user-defined module's write to its
        parameter, and a hook's write to an eval-mode BatchNorm's buffer, reach copies."""

        class Scales(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(2))

            def forward(self, x):
                self.scale.data.add_(1)
                return x * self.scale

        def widens(module, args):
            module.running_var.mul_(4)

        norm = nn.BatchNorm1d(2).eval()
        norm.register_forward_pre_hook(widens)
        model = nn.Sequential(nn.Sequential(Scales()), norm)
        before = snapshot(model)
        specfx.trace(model, (torch.ones(3, 2),), leaf_modules=[nn.Sequential, nn.BatchNorm1d])
        assert_state_equal(model, before)


class TestThreads:
    """Barriers, never sleeps: each test holds one thread at a known point."""

    def test_eager_steps_of_another_thread_during_a_trace_are_kept(self):
        import threading

        inside, done = threading.Barrier(2), threading.Barrier(2)

        class PausesAfterNorm(nn.Module):
            def __init__(self, shared):
                super().__init__()
                self.shared = shared

            def forward(self, x):
                y = self.shared(x)
                inside.wait(30)
                done.wait(30)
                return y

        bn = nn.BatchNorm1d(4).train()
        model = PausesAfterNorm(bn)

        def eager_steps():
            inside.wait(30)
            try:
                for _ in range(3):
                    bn(torch.randn(8, 4))
            finally:
                done.wait(30)

        thread = threading.Thread(target=eager_steps)
        thread.start()
        specfx.trace(model, (torch.randn(8, 4),))
        thread.join()
        assert int(bn.num_batches_tracked) == 3

    def test_two_traces_of_one_model_from_two_threads_leave_it_unchanged(self):
        import threading

        model = Normed().train()
        before = snapshot(model)
        start = threading.Barrier(2)
        errors = []

        def run():
            start.wait(30)
            try:
                for _ in range(3):
                    specfx.trace(model, (torch.randn(8, 4) + 3,), policy=Policy(bool=True))
            except Exception as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert_state_equal(model, before)

    @pytest.mark.parametrize("held", [False, True], ids=["global_rng", "model_generator"])
    def test_draws_of_another_thread_during_a_trace_are_not_replayed(self, held):
        import threading

        inside, done = threading.Barrier(2), threading.Barrier(2)
        shared = torch.Generator() if held else torch.default_generator

        class DrawsAroundAPause(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen = shared

            def forward(self, x):
                noise = torch.randn(x.shape, generator=self.gen if held else None)
                inside.wait(30)
                done.wait(30)
                return x + noise + torch.rand_like(x) + nn.functional.dropout(x, 0.5)

        shared.manual_seed(0)
        expected = torch.rand(6, generator=shared)  # the other thread's draws without a trace
        shared.manual_seed(0)
        drawn = []

        def draw():
            inside.wait(30)
            try:
                drawn.append(torch.rand(3, generator=shared))
            finally:
                done.wait(30)

        thread = threading.Thread(target=draw)
        thread.start()
        specfx.trace(DrawsAroundAPause(), (torch.ones(4),))
        thread.join()
        drawn.append(torch.rand(3, generator=shared))
        assert torch.equal(torch.cat(drawn), expected)


class TestPrivateDraws:
    """Random ops evaluated by the trace draw from private generators in the state
    eager would draw from: the trace's decisions are eager's, nothing is advanced."""

    @pytest.mark.parametrize("seed", range(6))
    def test_a_decision_on_a_random_value_is_the_one_eager_takes(self, seed):
        class Coin(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.5)

            def forward(self, x):
                y = self.drop(x) + torch.rand_like(x)
                return x * 2 if y.sum() > 3 else x

        model = Coin().train()
        torch.manual_seed(seed)
        before = torch.get_rng_state()
        gm = specfx.trace(model, (torch.ones(4),), policy=Policy(bool=True))
        assert torch.equal(torch.get_rng_state(), before)
        torch.manual_seed(seed)
        eager = bool((model.drop(torch.ones(4)) + torch.rand_like(torch.ones(4))).sum() > 3)
        (record,) = specfx.specializations(gm)
        assert record.value is eager

    def test_every_way_to_draw_leaves_the_generators_alone(self):
        class DrawsEverything(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen = torch.Generator().manual_seed(7)
                self.attention = nn.MultiheadAttention(4, 2, dropout=0.5)
                self.lstm = nn.LSTM(4, 4, num_layers=2, dropout=0.5)

            def forward(self, x):
                return (torch.randn(x.shape, generator=self.gen), torch.randn(x.shape), torch.rand_like(x),
                        x.clone().uniform_(), torch.bernoulli(torch.full_like(x, 0.5)),
                        torch.native_dropout(x, 0.5, True)[0], torch.randperm(4), torch.multinomial(x.abs() + 1, 2),
                        self.attention(x[None], x[None], x[None])[0], self.lstm(x[None])[0],
                        nn.functional.rrelu(x, training=True))

        model = DrawsEverything().train()
        x = torch.randn(3, 4)
        torch.manual_seed(0)
        generator, default = model.gen.get_state(), torch.get_rng_state()
        gm = specfx.trace(model, (x,))
        assert torch.equal(model.gen.get_state(), generator) and torch.equal(torch.get_rng_state(), default)
        torch.manual_seed(0)
        expected = model(x)
        model.gen.set_state(generator)
        torch.manual_seed(0)
        for want, got in zip(expected, gm(x)):
            assert torch.equal(want, got)


def test_an_in_place_leaf_on_a_tensor_the_model_holds_writes_a_copy():
    """`nn.ReLU(inplace=True)` (or a user's leaf) applied to a plain tensor attribute, or one in
    a list, during the trace writes the trace's copy: the model is as it was, and the graph
    writes the model's tensor when it runs, as eager does."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = nn.ReLU(inplace=True)
            self.plain = torch.tensor([-1.0, 2.0])
            self.listed = [torch.tensor([-3.0, 4.0])]

        def forward(self, x):
            return self.relu(self.plain) + self.relu(self.listed[0]) + x

    traced, eager = Model(), Model()
    x = torch.ones(2)
    gm = specfx.trace(traced, (x,))
    assert torch.equal(traced.plain, torch.tensor([-1.0, 2.0]))
    assert torch.equal(traced.listed[0], torch.tensor([-3.0, 4.0]))
    assert torch.equal(gm(x), eager(x))
    assert torch.equal(traced.plain, eager.plain) and torch.equal(traced.listed[0], eager.listed[0])


class TestTablesThatAreNotDicts:
    """Offloading libraries (compressed-tensors inside llm-compressor's oneshot, accelerate)
    replace a module's parameter table with a mapping that is not a dict."""

    class OffloadedTable(collections.abc.MutableMapping):
        def __init__(self, items):
            self._items = dict(items)

        def __getitem__(self, key):
            return self._items[key]

        def __setitem__(self, key, value):
            self._items[key] = value

        def __delitem__(self, key):
            del self._items[key]

        def __iter__(self):
            return iter(self._items)

        def __len__(self):
            return len(self._items)

    def test_trace_reads_them_and_leaves_them_as_they_were(self):
        """The trace runs, equals eager, and every table is the same object with the same contents."""
        model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
        for layer in (model[0], model[2]):
            layer._parameters = self.OffloadedTable(layer._parameters)
        tables = [(m._parameters, dict(m._parameters)) for m in model.modules()]
        x = torch.randn(4, 3)
        gm = specfx.trace(model, (x,))
        assert torch.equal(gm(x), model(x))
        assert all(m._parameters is table and dict(table) == contents
                   for m, (table, contents) in zip(model.modules(), tables))

    def test_a_forward_that_rebinds_a_parameter_is_put_back(self):
        """A write into such a table during the trace is put back, as in a dict table."""

        class Rebinds(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(2, 2)

            def forward(self, x):
                self.lin.bias = None  # (written into the table: lin._parameters["bias"] = None)
                return self.lin(x)

        model = Rebinds()
        model.lin._parameters = self.OffloadedTable(model.lin._parameters)
        bias = model.lin.bias
        with pytest.raises(specfx.SpecializationError, match=r"lin\.bias \(a parameter replaced\)"):
            specfx.trace(model, (torch.ones(1, 2),))
        assert model.lin.bias is bias
