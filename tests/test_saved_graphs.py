"""Graphs saved by earlier releases still load, run and check their guards."""

import copy
import pathlib
import sys

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


sys.path.insert(0, str(FIXTURES))  # the pickles name their model's module by its own name
import buffers_model  # noqa: E402

BUFFER_GRAPHS = sorted(FIXTURES.glob("buffers_*.pt"))


def test_every_release_since_0_2_left_a_buffers_graph():
    assert [path.name for path in BUFFER_GRAPHS][:1] == ["buffers_0.2.0.pt"]
    assert (FIXTURES / f"buffers_{specfx.__version__}.pt").exists(), "save one: python tests/fixtures/buffers_model.py"


@pytest.mark.parametrize("path", BUFFER_GRAPHS, ids=lambda path: path.name)
def test_buffers_graph_loads_runs_and_retraces(path):
    """A graph saved by a release: it runs as eager at other lengths, its guard fires, and its
    records and calls survive deepcopy, specfx.trace(gm) and torch.fx.symbolic_trace(gm)."""
    gm = torch.load(path, weights_only=False)
    model = buffers_model.Embedding()
    model.load_state_dict(gm.state_dict())
    kinds = [str(s.kind) for s in gm.specializations]
    assert "bool" in kinds and "buffers_model.py:26" in specfx.explain(gm)
    for again in (gm, copy.deepcopy(gm), specfx.trace(gm), torch.fx.symbolic_trace(gm)):
        for length in (3, 7):
            x = torch.rand(2, length, 4)
            assert torch.equal(again(x), model(x))
        with pytest.raises(specfx.GuardError, match=r"x\.sum\(\) > 0"):
            again(-torch.rand(2, 5, 4))
    assert copy.deepcopy(gm).specializations == gm.specializations == specfx.trace(gm).specializations
