"""explain(): the review table."""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy, explain

from specfx._guards import Specialization
from specfx._frames.source import SourceLocation

from .models import SplitCat


def _rows(report):
    """The table rows of an explain() report (no summary, no header)."""
    return report.splitlines()[2:]


def two_checks_on_one_line(x):
    return x * 2 if x.shape[0] > 1 and x.sum() > 0 else x


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
        assert row.endswith("len(x) == 2  return self.call_cat(*x)")

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


class TestGrouping:
    def test_two_checks_on_one_line_are_two_rows(self):
        """A shape predicate and a data predicate on one source line are two decisions, two rows."""
        gm = specfx.trace(two_checks_on_one_line, torch.ones(3), policy=Policy(bool=True))
        rows = _rows(explain(gm))
        assert len(gm.specializations) == 2 and len(rows) == 2
        assert [row.split()[4] for row in rows] == ["1", "1"]
        assert explain(gm).splitlines()[0].startswith("specfx: 2 specializations from 1 source line")

    def test_same_line_in_a_loop_is_one_row(self):
        """One check run for every element of a loop is one decision made again: one row with a count."""

        def f(x):
            for row in x:
                x = x + 1 if row.sum() > 0 else x
            return x

        gm = specfx.trace(f, torch.ones(3, 2), policy=Policy(bool=True, iter=True))
        bool_rows = [row for row in _rows(explain(gm)) if row.split()[1] == "bool"]
        assert len(bool_rows) == 1 and bool_rows[0].split()[4] == "3"

    def test_different_values_are_different_rows(self):
        """The same check with different answers in two layers is two rows."""

        class Signed(nn.Module):
            def __init__(self, sign):
                super().__init__()
                self.sign = sign

            def forward(self, x):
                x = x * self.sign
                return x + 1 if x.sum() > 0 else x - 1

        model = nn.Sequential(Signed(1.0), Signed(-1.0))
        gm = specfx.trace(model, torch.ones(2), policy=Policy(bool=True))
        assert [row.split()[2] for row in _rows(explain(gm))] == ["True", "False"]

    def test_windows_paths_keep_their_location(self):
        """A record made on Windows (a drive letter and colons in the path) keeps its whole location."""
        records = [
            Specialization(kind="bool", flag=specfx.Specialize.BOOL, value=True, expression=f"bool({name})",
                           node=name, location=SourceLocation("C:\\models\\net.py", 12, "Net.forward", offset),
                           guard=f"guard_{name}")
            for name, offset in (("a", 10), ("b", 24), ("c", 10))
        ]
        rows = _rows(explain(records))
        assert [row.split()[4:6] for row in rows] == [["2", "C:\\models\\net.py:12"],
                                                      ["1", "C:\\models\\net.py:12"]]


class TestSpecializations:
    def test_typed_records_of_a_graph(self):
        """specfx.specializations(gm) returns the graph's records as a tuple."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        records = specfx.specializations(gm)
        assert isinstance(records, tuple) and records == tuple(gm.specializations)
        assert all(isinstance(record, Specialization) for record in records)

    def test_rejects_other_objects(self):
        """specializations() of a module specfx did not trace is a TypeError."""
        with pytest.raises(TypeError, match="neither specializations nor specfx guard nodes"):
            specfx.specializations(torch.fx.symbolic_trace(nn.ReLU()))


class TestExplainCopies:
    def test_deep_copy(self):
        """A deep copy explains the same."""
        gm = specfx.trace(Stack(3), torch.ones(3), policy=Policy(bool=True))
        assert explain(copy.deepcopy(gm)) == explain(gm)

    def test_loaded_pickle(self):
        """A graph saved and loaded in memory explains the same (also checked with a file above)."""
        gm = specfx.trace(two_checks_on_one_line, torch.ones(3), policy=Policy(bool=True))
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        assert explain(torch.load(buffer, weights_only=False)) == explain(gm)


class TestExplainFromGuards:
    def test_graph_that_lost_its_records_is_explained_from_guard_nodes(self):
        """A graph copied without its attributes (as FX quantization does) is explained from its guards."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        copied = torch.fx.GraphModule(gm, gm.graph)
        summary, _, row = explain(copied).splitlines()
        assert summary == "specfx: 1 specialization from 1 source line (len: 1), all guarded"
        assert row.split()[3] == "always"
        assert row.split()[5] == gm.specializations[0].where + ":"
        assert row.endswith(f"{gm.specializations[0].source}  {gm.specializations[0].guard_description}")
        (record,) = specfx.specializations(copied)
        assert (record.value, record.expression, record.location) == (2, gm.specializations[0].expression, None)

    def test_two_checks_on_one_line_stay_apart(self):
        """Rebuilt from guards, two checks on one line are still two rows."""
        gm = specfx.trace(two_checks_on_one_line, torch.ones(3), policy=Policy(bool=True))
        assert len(_rows(explain(torch.fx.GraphModule(gm, gm.graph)))) == 2

    def test_windows_location_text_is_kept_whole(self):
        """A guard whose location text has a drive letter shows it whole."""
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        graph.call_function(specfx.guard_len, (x, 2, "len(x)", "C:\\models\\net.py:7: a, b = x"))
        graph.output(x)
        (row,) = _rows(explain(torch.fx.GraphModule(nn.Module(), graph)))
        assert "C:\\models\\net.py:7: a, b = x" in row and "len(x) == 2" in row

    def test_brevitas_graph(self):
        """A Brevitas GraphModule (its own FX copy, not torch.fx.Graph) holding the guards is explained."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # brevitas' import-time deprecations
            from brevitas.backport.fx import Graph, GraphModule
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=Policy(iter=True))
        graph = Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        brevitas_gm = GraphModule(gm, graph)
        assert not isinstance(brevitas_gm.graph, torch.fx.Graph)
        assert _rows(explain(brevitas_gm)) == _rows(explain(torch.fx.GraphModule(gm, gm.graph)))
