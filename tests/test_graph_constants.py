"""Every constant the generated code names runs, re-traces and pickles: numpy scalars
(numpy 2 prints ``np.float64(0.9)``), numpy arrays and dtypes, torch dtypes, devices and
sizes, enum members, dataclass instances."""

import dataclasses
import enum
import pickle

import numpy as np
import pytest
import torch
from torch import nn

import specfx


class Mode(enum.Enum):
    SCALE = 3


@dataclasses.dataclass(frozen=True)
class Scale:
    factor: float


@torch.fx.wrap
def apply_constant(x, constant):
    """Takes the constant itself, so the graph must hand over an equal object."""
    if isinstance(constant, Mode):
        return x * constant.value
    if isinstance(constant, Scale):
        return x * constant.factor
    raise TypeError(type(constant))


CASES = {
    "numpy float64 (a float subclass)": lambda x: x * np.float64(0.9),
    "numpy float32": lambda x: torch.mul(x, np.float32(0.5)),
    "numpy int64 as a dim": lambda x: x.sum(dim=np.int64(1)),
    "numpy bool": lambda x: torch.where(torch.tensor(np.bool_(True)), x, -x),
    "numpy scalar making a float64 tensor": lambda x: x + torch.tensor(np.float64(0.25)),
    "numpy array": lambda x: x + torch.as_tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32)),
    "numpy dtype": lambda x: x + torch.from_numpy(np.ones(3, dtype=np.dtype("float32"))),
    "torch dtype": lambda x: x.to(torch.float64),
    "torch device": lambda x: x.to(torch.device("cpu")) * 2,
    "torch.Size": lambda x: x.new_zeros(torch.Size([2, 3])) + x,
    "enum member": lambda x: apply_constant(x, Mode.SCALE),
    "dataclass instance": lambda x: apply_constant(x, Scale(1.5)),
}


def _model(body):
    class Model(nn.Module):
        def forward(self, x):
            return body(x)
    return Model()


@pytest.mark.parametrize("name", list(CASES))
def test_each_constant_kind_renders_runs_and_pickles(name):
    model = _model(CASES[name])
    gm = specfx.trace(model, (torch.randn(2, 3),))
    assert "np." not in gm.code and "array(" not in gm.code  # nothing the generated code cannot import
    x = torch.randn(2, 3)
    expected = model(x)
    for graph in (gm, pickle.loads(pickle.dumps(gm)), specfx.trace(gm, (x,))):
        got = graph(x)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_numpy_array_output_is_returned_as_eager_returns_it_a_new_one_per_call():
    class Positions(nn.Module):
        def forward(self, x):
            return x * 2, np.arange(4).reshape(2, 2)

    model = Positions()
    gm = specfx.trace(model, (torch.randn(3),))
    x = torch.randn(3)
    (tensor, first), (eager_tensor, eager_array) = gm(x), model(x)
    assert torch.equal(tensor, eager_tensor)
    assert type(first) is np.ndarray and np.array_equal(first, eager_array)
    first[0, 0] = 99  # the caller's array is its own: the next call is unaffected
    second = gm(x)[1]
    assert second is not first and np.array_equal(second, eager_array)
    assert np.array_equal(pickle.loads(pickle.dumps(gm))(x)[1], eager_array)


def test_constants_do_not_stay_on_the_model():
    model = _model(CASES["numpy float32"])
    specfx.trace(model, (torch.randn(2, 3),))
    assert not [name for name in vars(model) if name.startswith("_specfx")]
