"""explain(): the review table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy, explain

from .models import SplitCat


class Layer(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


class Stack(nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class TestExplain:
    def test_table_rows_and_summary(self):
        """One row per decision with kind, value, flag, location, guard and source."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        summary, header, row = explain(gm).splitlines()
        assert summary == "specfx: 1 specialization from 1 source line (iter: 1), all guarded"
        assert header.split() == ["#", "kind", "value", "flag", "count", "location", "guard", "source"]
        assert row.split()[:5] == ["1", "iter", "2", "ITER_LEN", "1"]
        assert row.endswith("len(split) == 2  return self.call_cat(*x)")

    def test_repeated_check_is_one_row_with_count(self):
        """The same check in every layer is one row with the count of layers."""
        gm = specfx.trace(Stack(4), torch.ones(3), policy=Policy(bool=True))
        lines = explain(gm).splitlines()
        assert lines[0] == "specfx: 4 specializations from 1 source line (bool: 4), all guarded"
        assert len(lines) == 3 and lines[2].split()[4] == "4"
        assert len(gm.specializations) == 4 and len({s.guard for s in gm.specializations}) == 4

    def test_unguarded_is_said(self):
        """A graph traced with guards=False says nothing is guarded."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True), guards=False)
        report = explain(gm)
        assert "NONE guarded (traced with guards=False)" in report and "NOT GUARDED" in report

    def test_no_specializations(self):
        """A graph with nothing baked in says so."""
        assert explain(specfx.trace(nn.ReLU())).startswith("specfx: no specializations")

    def test_degenerate_is_flagged(self):
        """Decisions on degenerate examples are counted in the summary."""
        with pytest.warns(specfx.SpecializationWarning):
            gm = specfx.trace(lambda x: sum(torch.unbind(x)), torch.ones(1, 2), policy="iter")
        assert "1 decided on a degenerate example" in explain(gm).splitlines()[0]

    def test_rejects_other_objects(self):
        """explain() of a plain module is a TypeError that says what it takes."""
        with pytest.raises(TypeError, match="GraphModule made by specfx.trace"):
            explain(nn.ReLU())

    def test_survives_save_and_load(self, tmp_path):
        """A saved and reloaded graph explains the same."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        torch.save(gm, tmp_path / "gm.pt")
        assert explain(torch.load(tmp_path / "gm.pt", weights_only=False)) == explain(gm)


class TestExplainFromGuards:
    def test_graph_that_lost_its_records_is_explained_from_guard_nodes(self):
        """A graph copied without its attributes (as FX quantization does) is explained from its guards."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        copied = torch.fx.GraphModule(gm, gm.graph)
        summary, _, row = explain(copied).splitlines()
        assert summary == "specfx: 1 specialization from 1 source line (len: 1), all guarded"
        assert "len(split) == 2" in row and row.split()[3] == "always"
        assert row.split()[5] == gm.specializations[0].where
