"""Which tensors ``specfx._held`` treats as held by the model (read by the graph at run time)."""

import torch
from torch import nn

from specfx._held import held_tensors


def test_plain_and_contained_tensors_are_held_but_parameters_and_buffers_are_not():
    """Parameters and buffers are read through torch.fx's attribute hook; only tensors the
    model keeps as plain attributes (or in lists, tuples and dicts) need the torch function
    mode, which every torch call of the trace would otherwise pay for (a BatchNorm's buffers
    used to switch it on for every CNN)."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.BatchNorm1d(2)
            self.linear = nn.Linear(2, 2)
            self.total = torch.zeros(2)
            self.stats = [torch.ones(1), {"scale": torch.ones(3)}]

    model = Model()
    held = held_tensors(model)
    assert {id(t) for t, _ in held.values()} == {
        id(model.total), id(model.stats[0]), id(model.stats[1]["scale"])}
    assert sorted(str(name) for _, name in held.values()) == ["None", "None", "total"]
    assert held_tensors(nn.Sequential(nn.Conv2d(1, 1, 1), nn.BatchNorm2d(1))) == {}
