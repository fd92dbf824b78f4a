"""Specializer: trace on first use, re-specialize when guards fail."""

from __future__ import annotations

import copy
import operator
import threading

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError, Policy, Specializer, VariantLimitError

from .models import SplitCat


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:
            return y.relu()
        return -y


class ModeDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        x = self.lin(x)
        if self.training:  # a Python bool: baked into the graph, so the mode must select variants
            x = x * 0.5
        return x


class Counted(nn.Module):
    """A shape-specialized model counting how often its leaf actually runs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0
        self.lin.register_forward_hook(self._count)

    def _count(self, module, inputs, output):
        self.calls += 1

    def forward(self, x):
        return self.lin(x).view(x.size(0), -1)


def positive_and_negative(model):
    """Inputs taking each branch of Gate (whose weights are random) in eager."""
    x = torch.randn(3, 4)
    total = model.lin(x).sum()
    # lin is affine, so scaling the input far along +-x moves the sum through zero
    scale = 1e3 if (model.lin(1e3 * x).sum() > 0) else -1e3
    pos, neg = scale * x, -scale * x
    assert model.lin(pos).sum() > 0 >= model.lin(neg).sum(), total
    return pos, neg


class TestVariants:
    def test_data_branch_gets_two_variants_and_eager_answers(self):
        """Both branches of a data-dependent `if` get a variant; answers always match eager."""
        model = Gate().eval()
        spec = Specializer(model, Policy(bool=True))
        pos, neg = positive_and_negative(model)
        for x in [pos, neg, pos, neg]:
            torch.testing.assert_close(spec(x), model(x))
        assert len(spec.variants) == 2
        assert [s.value for v in spec.variants for s in v.specializations] == [True, False]

    def test_split_count_change_creates_variant(self):
        """A different number of chunks traces a new variant; old inputs still use the old one."""
        spec = Specializer(SplitCat(), "iter")
        a, b = torch.randn(1, 4, 2, 2), torch.randn(2, 6, 2, 2)
        assert torch.equal(spec(a), SplitCat()(a)) and torch.equal(spec(b), SplitCat()(b))
        assert torch.equal(spec(a), SplitCat()(a))
        assert [v.specializations[0].value for v in spec.variants] == [2, 3]

    def test_max_variants_overflow_lists_variants(self):
        """Past max_variants the error lists each variant and the guard that rejected the input."""
        spec = Specializer(SplitCat(), "iter", max_variants=2)
        spec(torch.randn(1, 4, 1, 1))
        spec(torch.randn(1, 6, 1, 1))
        with pytest.raises(VariantLimitError) as caught:
            spec(torch.randn(1, 8, 1, 1))
        message = str(caught.value)
        assert "max_variants=2 is reached" in message
        assert "variant 0 (traced on Tensor(shape=(1, 4, 1, 1)" in message and "len(x) == 4" in message
        assert "variant 1 (traced on Tensor(shape=(1, 6, 1, 1)" in message

    def test_raise_mode_never_retraces(self):
        """on_guard_failure='raise' keeps the first variant and raises its GuardError."""
        spec = Specializer(SplitCat(), "iter", on_guard_failure="raise")
        spec(torch.randn(1, 4, 1, 1))
        with pytest.raises(GuardError, match="len\\(x\\) == 2"):
            spec(torch.randn(1, 6, 1, 1))
        assert len(spec.variants) == 1

    def test_metadata_guards_are_checked_before_running(self):
        """A variant rejected on shapes is not run: the prologue checks them first."""
        model = Counted()
        spec = Specializer(model, Policy(shapes=True))
        spec(torch.randn(2, 4))
        spec(torch.randn(3, 4))
        model.calls = 0
        spec(torch.randn(3, 4))  # variant 0 (batch 2) rejected up front; variant 1 runs once
        assert model.calls == 1
        assert spec.variants[0].specializations[0].kind == "size"

    def test_training_mode_selects_variants(self):
        """Switching train/eval uses (or traces) a variant for that mode."""
        model = ModeDependent()
        spec = Specializer(model)
        x = torch.randn(2, 3)
        spec.train()
        torch.testing.assert_close(spec(x), model(x))
        spec.eval()
        assert not model.training
        torch.testing.assert_close(spec(x), model(x))
        assert len(spec.variants) == 2

    def test_under_no_grad(self):
        """Calls under torch.no_grad() trace and run without autograd."""
        model = Gate().eval()
        spec = Specializer(model, "bool")
        with torch.no_grad():
            out = spec(torch.randn(3, 4))
        assert not out.requires_grad

    def test_cache_key_partitions(self):
        """cache_key keeps variants for different keys apart."""
        spec = Specializer(lambda x: x * 2, cache_key=lambda x: x.dtype)
        spec(torch.ones(2))
        spec(torch.ones(2, dtype=torch.float64))
        assert len(spec.variants) == 2


class TestWrapper:
    def test_state_dict_is_the_models(self):
        """The wrapper's state_dict and parameters are the model's own."""
        model = Gate()
        spec = Specializer(model, "bool")
        assert spec.state_dict().keys() == model.state_dict().keys()
        assert all(a is b for a, b in zip(spec.parameters(), model.parameters()))
        spec.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
        assert torch.count_nonzero(model.lin.weight) == 0

    def test_move_drops_variants(self):
        """.to() drops the variants (their buffers would be stale); the next call retraces."""
        spec = Specializer(nn.Sequential(nn.BatchNorm1d(3)).eval())
        spec(torch.randn(4, 3))
        spec.to(torch.float64)
        assert spec.variants == []
        assert spec(torch.randn(4, 3, dtype=torch.float64)).dtype == torch.float64

    def test_first_call_changes_state_like_one_eager_call(self):
        """Tracing adds no state change of its own: one call updates BatchNorm stats as one eager call does."""
        model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).train()
        reference = copy.deepcopy(model)
        x = torch.randn(4, 3)
        torch.testing.assert_close(Specializer(model)(x), reference(x))
        assert all(torch.equal(reference.state_dict()[k], v) for k, v in model.state_dict().items())

    def test_explain_shows_differences(self):
        """explain() lists each variant and the decisions that differ."""
        model = Gate().eval()
        spec = Specializer(model, Policy(bool=True))
        for x in positive_and_negative(model):
            spec(x)
        report = spec.explain()
        assert report.startswith("Specializer(Gate): 2 variant(s)")
        assert "decisions that differ between variants:" in report
        assert "v0=True, v1=False" in report

    @pytest.mark.parametrize(
        "kwargs, error",
        [({"max_variants": 0}, ValueError), ({"on_guard_failure": "ignore"}, ValueError),
         ({"cache_key": 3}, TypeError), ({"check_inputs": []}, TypeError)],
    )
    def test_bad_options(self, kwargs, error):
        """Bad options are rejected up front with a clear error."""
        with pytest.raises(error):
            Specializer(SplitCat(), **kwargs)


class TestThreads:
    def test_concurrent_calls_agree_with_eager(self):
        """Many threads calling with different inputs all get eager's answers; variants stay bounded."""
        spec = Specializer(SplitCat(), "iter", max_variants=8)
        inputs = [torch.randn(1, channels, 2, 2) for channels in (4, 6, 8) for _ in range(6)]
        barrier = threading.Barrier(6)
        errors, results = [], {}

        def work(offset):
            try:
                barrier.wait()
                for i in range(offset, len(inputs), 6):
                    results[i] = spec(inputs[i])
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors
        assert all(torch.equal(results[i], SplitCat()(x)) for i, x in enumerate(inputs))
        assert sorted(v.specializations[0].value for v in spec.variants) == [2, 3, 4]


# -- retries repeat nothing, variants see the live model, options refused up front ----------


class AddsThenBranches(nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2 if x.sum() > 0 else x - 1


class NormThenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        y = self.bn(x)
        return y * 2 if x.sum() > 0 else y - 1


class DropThenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(x)
        return y * 2 if x.sum() > 0 else y - 1


def appends_then_sums(xs, x):
    xs = list(xs)  # (appending to the caller's list itself is refused: tests/test_input_writes.py)
    xs.append(x)
    return sum(xs)


class TestRetriesRepeatNothing:
    def test_an_in_place_write_before_a_failed_guard_happens_once(self):
        spec = specfx.Specializer(AddsThenBranches(), Policy(bool=True))
        spec(torch.ones(3))
        x = -torch.full((3,), 5.0)
        out = spec(x)
        assert torch.equal(x, torch.full((3,), -4.0))  # one add_, as eager
        assert torch.equal(out, torch.full((3,), -5.0))
        assert spec.stats.restores == 1

    def test_batchnorm_counts_each_call_once(self):
        model = NormThenBranch().train()
        eager = copy.deepcopy(model)
        spec = specfx.Specializer(model, Policy(bool=True))
        for x in (torch.randn(4, 3) + 5, torch.randn(4, 3) - 5):
            assert torch.allclose(spec(x), eager(x))
        assert int(model.bn.num_batches_tracked) == int(eager.bn.num_batches_tracked) == 2
        assert torch.allclose(model.bn.running_mean, eager.bn.running_mean)

    def test_dropout_draws_once_per_call(self):
        model = DropThenBranch().train()
        spec = specfx.Specializer(model, Policy(bool=True))
        spec(torch.ones(8))
        torch.manual_seed(1)
        out = spec(-torch.ones(8))
        after = torch.get_rng_state()
        torch.manual_seed(1)
        expected = model(-torch.ones(8))
        assert torch.equal(out, expected)
        assert torch.equal(torch.get_rng_state(), after)

    def test_a_guard_after_a_mutation_of_an_input_list_is_not_in_the_prologue(self):
        spec = specfx.Specializer(appends_then_sums, Policy(iter=True), max_variants=2)
        for n in (1, 2, 1, 2, 1):
            xs = [torch.ones(2)] * n
            assert torch.equal(spec(xs, torch.ones(2)), torch.full((2,), n + 1.0))
            # (whether the caller's list is appended to follows the entry structure: io's concern)
        assert len(spec.variants) == 2

    def test_the_prologue_never_indexes_a_tensor(self):
        def first_positive(x):
            return x * 2 if x[0] > 0 else x

        spec = specfx.Specializer(first_positive, Policy(bool=True))
        spec(torch.ones(3))
        spec(-torch.ones(3))
        for variant in spec._all:
            if variant.prologue is not None:
                assert not any(n.target is operator.getitem for n in variant.prologue.graph.nodes)

    def test_a_prologue_error_is_a_miss(self):
        # variant 0's prologue reads xs[1].shape; a one-element list makes it raise IndexError
        def second_shape(xs):
            return xs[0] * 2 if xs[1].shape[0] == 2 else xs[0]

        spec = specfx.Specializer(lambda xs: torch.cat(xs) if len(xs) == 1 else second_shape(xs),
                                  Policy(shapes=True, bool=True, iter=True))
        spec([torch.ones(2), torch.ones(2)])
        spec([torch.ones(2), torch.ones(3)])
        assert torch.equal(spec([torch.ones(2)]), torch.ones(2))
        assert spec.stats.misses >= 2


class TestLiveState:
    def test_load_state_dict_with_assign(self):
        model = nn.Linear(2, 2)
        spec = specfx.Specializer(model)
        spec(torch.ones(1, 2))
        model.load_state_dict({"weight": torch.zeros(2, 2), "bias": torch.ones(2)}, assign=True)
        assert torch.equal(spec(torch.ones(1, 2)), model(torch.ones(1, 2)))

    def test_a_reassigned_buffer(self):
        class Shifts(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("shift", torch.zeros(2))

            def forward(self, x):
                return x + self.shift

        model = Shifts()
        spec = specfx.Specializer(model)
        spec(torch.ones(2))
        model.shift = torch.full((2,), 5.0)
        assert torch.equal(spec(torch.ones(2)), torch.full((2,), 6.0))

    def test_register_parametrization(self):
        import torch.nn.utils.parametrize as parametrize

        class Doubled(nn.Module):
            def forward(self, w):
                return w * 2

        model = nn.Linear(2, 2)
        spec = specfx.Specializer(model)
        spec(torch.ones(1, 2))
        parametrize.register_parametrization(model, "weight", Doubled())
        assert torch.allclose(spec(torch.ones(1, 2)), model(torch.ones(1, 2)))


class TestOptionsAndStats:
    @pytest.mark.parametrize("kwargs, error", [
        ({"guards": False}, ValueError),
        ({"bogus": 1}, TypeError),
        ({"autowrap_functions": [1]}, TypeError),
        ({"leaf_modules": [3]}, TypeError),
        ({"concrete_args": [1]}, TypeError),
    ])
    def test_refused_at_construction(self, kwargs, error):
        with pytest.raises(error):
            specfx.Specializer(Gate(), Policy(bool=True), **kwargs)

    def test_counts(self):
        spec = specfx.Specializer(lambda x: x * 2 if x.sum() > 0 else x - 1, Policy(bool=True))
        spec(torch.ones(2))
        spec(torch.ones(2))
        spec(-torch.ones(2))
        stats = spec.stats
        assert (stats.calls, stats.hits, stats.retraces) == (3, 1, 2)
        assert stats.misses == 1

    def test_concrete_args_retrace_on_another_value(self):
        def f(x, flag):
            return x + 1 if flag else x - 1

        spec = specfx.Specializer(f, concrete_args={"flag": True})
        assert torch.equal(spec(torch.ones(2), True), torch.full((2,), 2.0))
        assert torch.equal(spec(torch.ones(2), False), torch.zeros(2))
        assert len(spec.variants) == 2


class Branchy(torch.nn.Module):
    """Two paths on the sign of the input's sum (module-level: pickles name its class)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if x.sum() > 0 else y - 1


class TestPickling:
    """A Specializer pickles and reloads with its variants, like a GraphModule."""

    def _model(self):
        return Branchy()

    def test_reloaded_specializer_keeps_its_variants_and_matches_eager(self):
        import pickle

        model = self._model()
        spec = specfx.Specializer(model, specfx.Policy(bool=True))
        positive, negative = torch.ones(2, 3), -torch.ones(2, 3)
        spec(positive), spec(negative)
        loaded = pickle.loads(pickle.dumps(spec))
        assert len(loaded.variants) == 2
        traced = loaded.stats.retraces
        for x in (positive, negative, torch.randn(4, 3)):
            torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        assert loaded.stats.retraces == traced  # both branches answered by the reloaded variants
        # the reloaded wrapper shares its (reloaded) model's parameters, as the original does
        assert loaded.linear.weight is loaded.model.linear.weight
        with torch.no_grad():
            loaded.model.linear.weight.mul_(3)
        torch.testing.assert_close(loaded(positive), loaded.model(positive), rtol=0, atol=0)

    def test_reloaded_specializer_traces_new_variants_and_is_thread_safe_again(self):
        import pickle

        spec = specfx.Specializer(self._model(), specfx.Policy(bool=True))
        spec(torch.ones(2, 3))
        loaded = pickle.loads(pickle.dumps(spec))
        loaded(-torch.ones(2, 3))
        assert len(loaded.variants) == 2 and loaded.stats.retraces == 2
        assert len(spec.variants) == 1  # the original is unchanged
