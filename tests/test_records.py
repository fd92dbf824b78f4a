"""A graph's records and guards survive any sequence of deepcopy, torch.save/torch.load,
specfx.trace(gm) and torch.fx.symbolic_trace(gm)."""

import copy
import io
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specfx
from specfx import Policy


class Model(torch.nn.Module):
    """Decisions of three kinds, a buffer sliced by a traced size and a factory call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("positions", torch.arange(16.0).unsqueeze(0))
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        a, b = torch.chunk(x, 2, dim=1)
        if x.sum() > 0:
            a = a + 1
        n = x.shape[0]
        scale = torch.tensor(2.0)
        return self.linear(torch.cat([b, a], 1)) * scale + self.positions[:, :n].T


def save_and_load(gm):
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


OPERATIONS = {
    "save/load": save_and_load,
    "pickle": lambda gm: pickle.loads(pickle.dumps(gm)),
    "deepcopy": copy.deepcopy,
    "specfx.trace": specfx.trace,
    "symbolic_trace": torch.fx.symbolic_trace,
}
KEEP_THE_ATTRIBUTE = {"save/load", "pickle", "deepcopy", "specfx.trace"}


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    model = Model().eval()
    x = torch.rand(3, 4)
    gm = specfx.trace(model, (x,), policy=Policy(iter=True, bool=True, shapes=True))
    assert {str(s.kind) for s in gm.specializations} >= {"unpack", "bool"}
    return model, gm


def summary(records):
    # (read back from a guard node, an unpack reads as the length check it is)
    return [(s.value, s.expression) for s in records]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(sorted(OPERATIONS)), min_size=1, max_size=4))
def test_records_and_guards_survive_any_sequence(traced, steps):
    model, gm = traced
    graph = gm
    for step in steps:
        graph = OPERATIONS[step](graph)
    # the same guards, the same records (exact while every step kept the attribute,
    # read back from the guard nodes after torch.fx's own re-trace dropped it)
    assert graph.code.count("specfx_guard_") == gm.code.count("specfx_guard_")
    assert summary(specfx.specializations(graph)) == summary(gm.specializations)
    if set(steps) <= KEEP_THE_ATTRIBUTE:
        assert graph.specializations == gm.specializations
        assert copy.deepcopy(graph).specializations == gm.specializations
    if "symbolic_trace" not in steps:  # (torch.fx's own tracer makes constants of argument-less factories)
        assert graph.code.count("torch.tensor(") == gm.code.count("torch.tensor(") == 1
    assert "specfx" in specfx.explain(graph)
    x = torch.rand(3, 4)
    assert torch.equal(graph(x), model(x))
    with pytest.raises(specfx.GuardError):
        graph(-torch.rand(3, 4))  # the branch taken on x.sum() > 0 flips


def test_pickles_name_the_public_loader(traced):
    """Pickles of traced graphs name specfx.rebuild_graph_module, a stable public path."""
    _, gm = traced
    assert b"rebuild_graph_module" in pickle.dumps(gm)
    assert specfx.rebuild_graph_module.__module__ == "specfx"


def test_only_the_traced_graph_pickles_through_specfx(traced):
    """The loader is set on the graph's own class: another GraphModule pickles as torch.fx's."""
    other = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    assert b"rebuild_graph_module" not in pickle.dumps(other)
    assert b"rebuild_graph_module" in pickle.dumps(copy.deepcopy(save_and_load(traced[1])))
