"""Which tensors ``specfx._capture.held`` treats as held by the model (read by the graph at run time)."""

import torch
from torch import nn

from specfx._capture.held import held_tensors


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


def test_the_state_keepers_holders_find_what_a_full_scan_finds():
    """specfx.trace scans only the modules whose attributes are more than numbers, strings,
    flags and sizes (found by the StateKeeper in C); that must miss no held tensor: one in a
    torch module's attribute, one in a tuple among sizes, one in a dict, one two levels down."""
    from specfx._capture.state import StateKeeper

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3)  # kernel_size=(3, 3): a tuple of sizes, holds nothing
            self.norm = nn.LayerNorm(4)  # normalized_shape=(4,)
            self.pair = (2, torch.ones(1))  # a tensor among sizes
            self.scale = 0.5

    model = nn.Sequential(Block(), Block(), nn.ReLU())
    model[0].conv.mask = torch.zeros(3)  # a user's tensor on a torch module
    model[1].table = {"bias": [torch.ones(2)]}  # two levels down
    holders = StateKeeper(model, runs_ops=False).attribute_holders
    assert held_tensors(model, holders) == held_tensors(model)
    assert len(held_tensors(model)) == 4
    assert sorted(name for name, _ in holders) == ["0", "0.conv", "1"]


def test_the_held_tensors_of_a_traced_model_are_read_at_run_time():
    """End to end through the holders: an op on a tensor the model keeps in a tuple (and on
    nothing traced) is a node that reads it live, not a constant computed at trace time."""
    import specfx

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 2)
            self.offsets = (1, torch.zeros(2))

        def forward(self, x):
            return self.linear(x) + self.offsets[1] * 2

    model = Model()
    gm = specfx.trace(model, torch.randn(3, 2))
    x = torch.randn(3, 2)
    model.offsets[1].add_(5.0)  # the graph reads the model's tensor, not a trace-time copy
    assert torch.equal(gm(x), model(x))


def test_a_parameter_the_model_keeps_in_a_list_is_written_by_the_graph_as_in_eager():
    """`self.held = [self.lin.weight]`: a write through the alias (`.data.add_`) is read around
    torch.fx's attribute hook. The trace leaves the weight as it was; the graph writes it on
    every call, as eager does, and the leaf after it reads the written weight."""
    import copy

    import specfx

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.held = [self.lin.weight]

        def forward(self, x):
            self.held[0].data.add_(1)
            return self.lin(x)

    torch.manual_seed(0)
    eager = Model()
    traced = copy.deepcopy(eager)
    before = traced.lin.weight.detach().clone()
    x = torch.randn(2, 3)
    gm = specfx.trace(traced, (x,))
    assert torch.equal(traced.lin.weight, before)
    for _ in range(2):
        assert torch.equal(gm(x), eager(x))
    assert torch.equal(traced.lin.weight, eager.lin.weight)


def test_attributes_of_a_held_tensor_are_read_from_its_node():
    """`.data` and `.shape` of a tensor held as a plain attribute are read in the graph (they
    crashed the trace: the attribute's getter reached the torch function mode as `__get__`)."""
    import specfx

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.ones(3)

        def forward(self, x):
            self.scale.data.mul_(2)
            return x * self.scale + self.scale.shape[0]

    eager, traced = Model(), Model()
    x = torch.randn(3)
    gm = specfx.trace(traced, (x,))
    assert torch.equal(traced.scale, torch.ones(3))  # the trace wrote a copy
    for _ in range(3):
        assert torch.equal(gm(x), eager(x))


def test_a_torch_leafs_plain_tensor_weight_written_between_two_calls():
    """A Linear whose weight is a plain tensor (not a Parameter), written through `.data`
    between two calls of it: the trace leaves it as it was, the second call reads the write,
    and the graph equals eager call after call."""
    import copy

    import specfx

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3).eval()
            weight = self.lin.weight.detach().clone()
            del self.lin.weight
            self.lin.weight = weight

        def forward(self, x):
            first = self.lin(x)
            self.lin.weight.data.mul_(2)
            return first, self.lin(x)

    torch.manual_seed(0)
    traced = Model()
    eager = copy.deepcopy(traced)
    before = traced.lin.weight.clone()
    x = torch.randn(2, 3)
    gm = specfx.trace(traced, (x,))
    assert torch.equal(traced.lin.weight, before)
    for _ in range(2):
        assert all(torch.equal(a, b) for a, b in zip(gm(x), eager(x)))


def test_a_tensor_in_a_plain_object_the_model_holds_is_read_and_written_by_the_graph():
    """`self.cfg = SimpleNamespace(scale=...)`: a tensor inside a plain object is the model's
    too. An in-place op on it during the trace writes a copy (the model is as it was), and the
    graph writes the object's tensor on every call, as eager does."""
    import copy
    import types

    import specfx

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = types.SimpleNamespace(scale=torch.ones(3), name="cfg")

        def forward(self, x):
            self.cfg.scale.mul_(2)
            return x * self.cfg.scale

    traced = Model()
    eager = copy.deepcopy(traced)
    x = torch.randn(3)
    gm = specfx.trace(traced, (x,))
    assert torch.equal(traced.cfg.scale, torch.ones(3))
    for _ in range(3):
        assert torch.equal(gm(x), eager(x))
