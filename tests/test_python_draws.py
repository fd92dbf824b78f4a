"""Draws from Python's ``random`` in traced code: drawn again by the graph at every call
(Python's generator advances as in eager); a draw that decides something is refused."""

import pickle
import random

import pytest
import torch
from torch import nn

import specfx
from specfx.errors import SpecializationError


class LayerDrop(nn.Module):
    """The LayerDrop idiom: a draw per layer, compared only while training."""

    def __init__(self, layerdrop=0.3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.layerdrop = layerdrop

    def forward(self, x):
        for layer in self.layers:
            p = random.uniform(0, 1)
            if self.training and p < self.layerdrop:
                continue
            x = layer(x)
        return x


class Jitter(nn.Module):
    """Draws whose values flow into tensor ops."""

    def forward(self, x):
        scale = random.uniform(0.5, 1.5)
        shift = random.randint(-3, 3)
        return x * scale + shift + random.gauss(0.0, 1.0)


def _call_seeded(fn, x, seed):
    random.seed(seed)
    out = fn(x)
    return out, random.getstate()


@pytest.mark.parametrize("model", [LayerDrop().eval(), Jitter()], ids=["layerdrop-eval", "jitter"])
def test_graph_draws_as_eager_and_advances_pythons_generator_alike(model):
    x = torch.randn(2, 4)
    state = random.getstate()
    gm = specfx.trace(model, (x,))
    assert random.getstate() == state  # tracing drew privately: the user's generator is where it was
    for graph in (gm, pickle.loads(pickle.dumps(gm))):
        for seed in (0, 1, 2):
            got, after_graph = _call_seeded(graph, x, seed)
            expected, after_eager = _call_seeded(model, x, seed)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            assert after_graph == after_eager


def test_an_unused_draw_survives_dead_code_elimination():
    gm = specfx.trace(LayerDrop().eval(), (torch.randn(2, 4),))
    gm.graph.eliminate_dead_code()
    gm.recompile()
    assert gm.code.count("specfx_python_random('uniform', 0, 1)") == 3
    _, after_graph = _call_seeded(gm, torch.randn(2, 4), 5)
    _, after_eager = _call_seeded(LayerDrop().eval(), torch.randn(2, 4), 5)
    assert after_graph == after_eager


def test_jitter_differs_from_call_to_call_as_in_eager():
    gm = specfx.trace(Jitter(), (torch.zeros(3),))
    random.seed(7)
    first, second = gm(torch.zeros(3)), gm(torch.zeros(3))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("policy", [None, specfx.Policy(bool=True)], ids=["default policy", "bool granted"])
def test_a_draw_that_decides_is_refused_whatever_the_policy(policy):
    model = LayerDrop().train()
    with pytest.raises(SpecializationError) as info:
        specfx.trace(model, (torch.randn(2, 4),), policy=policy)
    message = str(info.value)
    assert message.startswith("`bool(p < 0.3)` decides on a value drawn by random.uniform() inside the traced code: "
                              "the graph draws anew on every call, but the path taken here would follow this "
                              "one draw.")
    assert "Fix: keep the draw's use in tensor ops" in message
    assert "test_python_draws.py" in message and "if self.training and p < self.layerdrop:" in message


def test_reading_a_draw_as_a_python_number_is_refused():
    def pick(x):
        return x[: int(random.uniform(1, 3))]

    with pytest.raises(SpecializationError, match=r"decides on a value drawn by random\.uniform\(\)"):
        specfx.trace(pick, torch.randn(4), policy=specfx.Policy(scalars=True, shapes=True))


def test_picking_from_a_sequence_stays_refused():
    def pick(x):
        return x * random.choice([1, 2])

    with pytest.raises(SpecializationError, match=r"random\.choice\(\) inside the traced code"):
        specfx.trace(pick, torch.randn(4))
