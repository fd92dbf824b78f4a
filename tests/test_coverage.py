"""specfx.coverage: exact per-guard counts over a calibration set, streamed, leaving
the model, the batches and the RNG as they were."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import Policy
from specfx._trace import progress as progress_module
from specfx._trace.coverage import as_call

from .models import MODELS_FILE, line_of

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Gated(nn.Module):
    """An optional mask, a batch size read as an int (a size that only flowed into the
    reshape would stay a read when the graph runs), and a branch on data."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        y = self.lin(x)
        b = int(x.shape[0])
        if y.sum() > 0:
            y = y * 2
        else:
            y = y - 1
        if mask is not None:
            y = y * mask
        return y.view(b, -1)


def _gated_batch(size: int, sign: int, masked: bool):
    x = torch.randn(size, 4, generator=torch.Generator().manual_seed(size * 7 + sign)) + 50.0 * sign
    return {"x": x, "mask": torch.ones(size, 4)} if masked else (x,)


def _traced_gated():
    torch.manual_seed(0)
    model = Gated().eval()
    with torch.no_grad():
        model.lin.weight.copy_(torch.eye(4))
        model.lin.bias.zero_()
    gm = specfx.trace(model, (torch.ones(3, 4),), policy=Policy(bool=True, shapes=True))
    return model, gm


class TestCounts:
    def test_the_table_a_user_reads(self):
        """str(report) names each assumption, its counts, the first failing batch with the
        value seen there, and the user's line."""
        _, gm = _traced_gated()
        batches = [torch.ones(3, 4), -torch.ones(3, 4), torch.ones(5, 4), {"x": torch.ones(3, 4), "mask": torch.ones(3, 4)}]
        report = specfx.coverage(gm, batches)
        at = lambda text: f"{MODELS_FILE.replace('models.py', 'test_coverage.py')}:{line_of(Gated, text)}"  # noqa: E731
        assert str(report).splitlines() == [
            "specfx coverage: 1 of 4 batches pass every guard; failing: batches 1, 2, 3",
            "#  assumption                 held  failed  not reached  first failure"
            "                        location" + " " * (len(at("b = int(x.shape[0])")) - 8) + "  source",
            f"1  mask is None               3     1       0            batch 3: mask is not None            "
            f"{at('def forward(self, x, mask=None)')}  def forward(self, x, mask=None):",
            f"2  x.size(0) == 3             3     1       0            batch 2: x.size(0) == 5              "
            f"{at('b = int(x.shape[0])')}  b = int(x.shape[0])",
            f"3  bool(y.sum() > 0) == True  1     1       2            batch 1: bool(y.sum() > 0) == False  "
            f"{at('if y.sum() > 0')}  if y.sum() > 0:",
        ]
        assert report.total == 4 and report.passed == 1 and not report.covered
        assert report.failed_batches == (1, 2, 3)
        row = report.guards[2]
        assert (row.held, row.failed, row.not_reached, row.first_failure, row.value_seen) == (1, 1, 2, 1, False)
        assert row.specialization is gm.specializations[2]

    @settings(max_examples=25, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from([2, 3, 5]), st.sampled_from([-1, 1]), st.booleans()),
                    min_size=1, max_size=12))
    def test_exact_counts(self, spec):
        """Every guard's held/failed/not-reached count, first failing batch and value, and the
        passing batches, equal what each batch does in eager; passing batches run equal to eager."""
        model, gm = _traced_gated()
        batches = [_gated_batch(*item) for item in spec]
        report = specfx.coverage(gm, iter(batches))
        expected = {"mask": [], "size": [], "branch": []}  # per guard: (index, held?, value) answered
        passed = []
        for index, batch in enumerate(batches):
            args, kwargs = as_call(batch)
            x = kwargs.get("x", args[0] if args else None)
            masked = "mask" in kwargs
            expected["mask"].append((index, not masked, False))
            expected["size"].append((index, x.shape[0] == 3, x.shape[0]))
            if not masked and x.shape[0] == 3:  # the guard on data runs when those up front held
                truth = bool(model.lin(x).sum() > 0)
                expected["branch"].append((index, truth, truth))
                if truth:
                    passed.append(index)
                    assert torch.equal(gm(*args, **kwargs), model(*args, **kwargs))
        assert report.total == len(batches)
        assert report.passed == len(passed)
        assert report.failed_batches == tuple(i for i in range(len(batches)) if i not in passed)
        for row, key in zip(report.guards, ("mask", "size", "branch")):
            answers = expected[key]
            failures = [(i, value) for i, held, value in answers if not held]
            assert row.held == len(answers) - len(failures)
            assert row.failed == len(failures)
            assert row.not_reached == len(batches) - len(answers)
            assert (row.first_failure, row.value_seen) == (failures[0] if failures else (None, None))

    def test_a_graph_without_guards_serves_every_batch_of_its_structure(self):
        """No guard: every batch passes, except one of another structure, counted in a row of its own."""
        gm = specfx.trace(lambda x: x * 2, torch.ones(2))
        report = specfx.coverage(gm, [torch.ones(3), torch.ones(1, 2), [torch.ones(2), torch.ones(2)]])
        assert (report.passed, report.failed_batches) == (2, (2,))
        (row,) = report.guards
        assert row.specialization is None
        assert (row.held, row.failed, row.first_failure) == (2, 1, 2)
        assert row.assumption == "the inputs' structure and types (checked at entry)"

    def test_a_batch_the_graph_raises_on(self):
        """An op that raises on a batch (before the last guard) is counted on a row of its own;
        the guards after it are not reached on that batch."""
        def product(x, y):
            z = x @ y
            return z * 2 if z.sum() > 0 else z

        gm = specfx.trace(product, (torch.ones(2, 3), torch.ones(3, 2)), policy=Policy(bool=True))
        report = specfx.coverage(gm, [(torch.ones(2, 3), torch.ones(3, 4)), (torch.ones(2, 3), torch.ones(2, 3))])
        error, guard = report.guards
        assert (error.assumption, error.held, error.failed, error.first_failure) == (
            "the graph runs up to its guards without an error", 1, 1, 1)
        assert error.value_seen.startswith("the graph raised RuntimeError: mat1 and mat2 shapes cannot be multiplied")
        assert (guard.held, guard.failed, guard.not_reached) == (1, 0, 1)

    def test_refuses_what_it_cannot_check(self):
        """guards=False leaves nothing to check: ValueError; not a GraphModule: TypeError."""
        gm = specfx.trace(lambda x: x * 2 if x.sum() > 0 else x, torch.ones(2), policy="bool", guards=False)
        with pytest.raises(ValueError, match="traced with guards=False"):
            specfx.coverage(gm, [torch.ones(2)])
        with pytest.raises(TypeError, match="takes a GraphModule made by specfx.trace; got Linear"):
            specfx.coverage(nn.Linear(2, 2), [torch.ones(2)])


class TestBatchForms:
    def test_every_dataloader_item_form(self):
        """A tensor, a tuple, a list, a dict, an (args, kwargs) pair and a DataLoader's collated dicts."""
        _, gm = _traced_gated()
        x, mask = torch.ones(3, 4), torch.ones(3, 4)
        report = specfx.coverage(gm, [x, (x,), [x], {"x": x}, ((x,), {"mask": mask}), [[x], {"mask": mask}]])
        assert report.failed_batches == (4, 5)  # the two with a mask: the graph was traced without
        loader = torch.utils.data.DataLoader([{"x": torch.ones(4)} for _ in range(6)], batch_size=3)
        assert specfx.coverage(gm, loader).covered

    def test_transformers_dict_batches(self):
        """BatchEncoding batches of several padded lengths: under SHAPES, BERT's sizes only flow
        into ops (`batch_size, seq_length = input_shape` and the views and expands built from
        them), so no dimension is decided and every batch passes, equal to eager."""
        transformers = pytest.importorskip("transformers")
        config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=20)
        model = transformers.BertModel(config).eval()
        batches = [transformers.BatchEncoding({"input_ids": torch.randint(1, 50, (2, n)),
                                               "attention_mask": torch.ones(2, n, dtype=torch.long)})
                   for n in (6, 6, 9, 6, 4)]
        gm = specfx.trace(model, example_kwargs=dict(batches[0]), policy=Policy(shapes=True))
        report = specfx.coverage(gm, batches)
        assert report.covered and report.failed_batches == ()
        assert not {"shape", "size"} & {str(s.kind) for s in gm.specializations}
        with torch.no_grad():
            for batch in batches:
                expected = model(**batch).last_hidden_state
                torch.testing.assert_close(gm(**batch).last_hidden_state, expected)


class NormThenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x.add_(1)
        y = self.drop(self.bn(x))
        return y * 2 if y.sum() > 0 else y - 1


CALLS = {"before": 0, "after": 0}  # outside the modules: coverage puts a leaf's own state back


class Counting(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        CALLS[self.name] += 1
        return x + 1


class CountAfterGuards(nn.Module):
    def __init__(self):
        super().__init__()
        self.before = Counting("before")
        self.after = Counting("after")

    def forward(self, x):
        n = int(x.size(0))
        y = self.before(x)
        y = y * 2 if y.sum() > 0 else y
        return self.after(y) * n


class ShapeOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.before = Counting("before")

    def forward(self, x):
        n = int(x.size(0))
        return self.before(x).view(n, -1)


class TestNothingChanges:
    def test_model_batches_and_rng_as_they_were(self):
        """A train-mode BatchNorm's statistics, the dropout's random draws and an in-place op
        on the input before the guard on data: all put back after each batch."""
        model = NormThenBranch().train()
        gm = specfx.trace(model, torch.randn(4, 3) + 3, policy=Policy(bool=True))
        batches = [torch.randn(4, 3) + 3, torch.randn(4, 3) - 9]
        kept = [b.clone() for b in batches]
        state = {k: v.clone() for k, v in model.state_dict().items()}
        rng = torch.get_rng_state()
        report = specfx.coverage(gm, batches)
        assert report.total == 2
        assert all(torch.equal(a, b) for a, b in zip(batches, kept))
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
        assert torch.equal(torch.get_rng_state(), rng)

    def test_runs_the_graph_only_as_far_as_its_guards(self):
        """Nothing after the last guard on data runs; with guards on input metadata alone,
        none of the model runs."""
        model = CountAfterGuards()
        gm = specfx.trace(model, torch.ones(2, 3), policy=Policy(bool=True, shapes=True), leaf_modules=[Counting])
        CALLS.update(before=0, after=0)
        specfx.coverage(gm, [torch.ones(2, 3)] * 3)
        assert CALLS == {"before": 3, "after": 0}
        shapes_only = specfx.trace(ShapeOnly(), torch.ones(2, 3), policy=Policy(shapes=True), leaf_modules=[Counting])
        CALLS.update(before=0, after=0)
        assert specfx.coverage(shapes_only, [torch.ones(2, 3), torch.ones(4, 3)]).failed_batches == (1,)
        assert CALLS == {"before": 0, "after": 0}

    def test_streams_a_one_shot_iterator(self):
        """A generator's batches are let go of as they are checked: memory does not grow with the set."""
        _, gm = _traced_gated()
        refs = []

        def batches():
            for index in range(20):
                batch = torch.ones(3, 4) * (index + 1)
                refs.append(weakref.ref(batch))
                yield batch
            gc.collect()
            assert sum(ref() is not None for ref in refs[:-2]) == 0

        assert specfx.coverage(gm, batches()).covered

    def test_a_specializer_variant(self):
        """The variants of a Specializer (which read the live model) are graphs like any other."""
        spec = specfx.Specializer(Gated(), Policy(bool=True, shapes=True))
        x = torch.randn(3, 4)
        spec(x)
        report = specfx.coverage(spec.variants[0], [x, torch.randn(5, 4)])
        assert report.failed_batches == (1,)


class TestProgress:
    def test_forced_on_and_off(self, capsys):
        """progress=True draws tqdm's bar on stderr; False and the default off a terminal draw nothing."""
        _, gm = _traced_gated()
        specfx.coverage(gm, [torch.ones(3, 4)] * 4, progress=True)
        assert "specfx coverage" in capsys.readouterr().err
        specfx.coverage(gm, [torch.ones(3, 4)] * 4, progress=False)
        specfx.coverage(gm, [torch.ones(3, 4)] * 4)
        assert capsys.readouterr().err == ""
        with pytest.raises(TypeError, match="progress= takes None"):
            specfx.coverage(gm, [], progress="yes")

    def test_plain_lines_without_tqdm(self, capsys, monkeypatch):
        """Without tqdm installed, a plain line now and then."""
        monkeypatch.setitem(sys.modules, "tqdm", None)
        monkeypatch.setattr(progress_module, "_PLAIN_EVERY", 0.0)
        _, gm = _traced_gated()
        specfx.coverage(gm, [torch.ones(3, 4)] * 2, progress=True)
        assert capsys.readouterr().err.splitlines() == [
            "specfx coverage: 1/2 batches (0 s)", "specfx coverage: 2/2 batches (0 s)", "specfx coverage: 2 batches done"]
