"""Graphs saved by earlier releases still load, run and check their guards."""

import pathlib

import pytest
import torch

import specfx

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def graph_0_1_0() -> torch.fx.GraphModule:
    # Written by specfx 0.1.0 (tests/fixtures/graph_0_1_0_model.py): its code imports the
    # guards as `specfx.guard_len` / `specfx.guard_truth` and its records name 0.1 modules.
    return torch.load(FIXTURES / "graph_0.1.0.pt", weights_only=False)


def test_graph_saved_by_0_1_0_runs(graph_0_1_0: torch.fx.GraphModule) -> None:
    x = torch.tensor([1.0, 2.0, 3.0])
    a, b = torch.tensor([2.0, 2.0, 2.0]), torch.tensor([0.5, 1.0, 4.0])
    torch.testing.assert_close(graph_0_1_0(x, [a, b]), x + a * b)


def test_graph_saved_by_0_1_0_guards_fire(graph_0_1_0: torch.fx.GraphModule) -> None:
    ones = torch.ones(3)
    with pytest.raises(specfx.GuardError, match=r"len\(xs\) == 2"):
        graph_0_1_0(ones, [ones, ones, ones])
    with pytest.raises(specfx.GuardError, match="True"):
        graph_0_1_0(-ones, [ones, ones])


def test_graph_saved_by_0_1_0_keeps_its_records(graph_0_1_0: torch.fx.GraphModule) -> None:
    kinds = [s.kind for s in graph_0_1_0.specializations]
    assert kinds == ["unpack", "bool"]
    assert "graph_0_1_0_model.py:13" in specfx.explain(graph_0_1_0)
