"""A dtype or device that only flows into ops follows the model and the inputs at run time,
as in eager: ``x.to(self.weight.dtype)`` and ``torch.zeros(n, device=x.device)`` read the
attribute when the graph runs, so a graph cast with ``.to(torch.bfloat16)`` computes what the
cast model computes. Where the model decides on a dtype, the guard says whose dtype changed."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError

from . import vision_models as V


class BranchOnWeightDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.lin.weight.dtype == torch.float16:
            x = x * 0.5
        return self.lin(x.to(self.lin.weight.dtype))


def test_no_dtype_or_device_is_baked_in():
    gm = specfx.trace(V.CastToWeight(), torch.randn(2, 4))
    assert "torch.float32" not in gm.code and "device(type=" not in gm.code
    assert not gm.specializations


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_the_graph_cast_computes_what_the_cast_model_computes(dtype):
    model = V.CastToWeight()
    gm = specfx.trace(model, torch.randn(2, 4))
    cast_graph, cast_model = copy.deepcopy(gm).to(dtype), copy.deepcopy(model).to(dtype)
    for x in (torch.randn(3, 4), torch.randn(5, 4).to(dtype)):
        out = cast_graph(x)
        assert out.dtype == dtype
        torch.testing.assert_close(out, cast_model(x))
    back_graph, back_model = cast_graph.to(torch.float32), cast_model.to(torch.float32)
    x = torch.randn(2, 4)
    torch.testing.assert_close(back_graph(x), back_model(x))


def test_a_decision_on_a_parameter_dtype_names_the_cast():
    model = BranchOnWeightDtype()
    gm = specfx.trace(model, torch.randn(2, 4))
    with pytest.raises(GuardError) as info:
        copy.deepcopy(gm).to(torch.bfloat16)(torch.randn(2, 4))
    message = str(info.value)
    assert "self.lin.weight.dtype == torch.float32" in message
    assert "The model's own tensor `self.lin.weight` was cast or moved since the trace" in message
    assert "specfx.trace(model.to(torch.bfloat16)" in message


def test_a_decision_on_an_input_dtype_names_the_input():
    def f(x):
        return x * 2 if x.dtype == torch.float32 else x

    gm = specfx.trace(f, torch.randn(2))
    with pytest.raises(GuardError, match=r"This input was cast or moved since the trace \(torch.float32 then, "
                                         r"torch.float64 now\): pass it as torch.float32"):
        gm(torch.randn(2).double())


def test_a_dtype_kept_in_a_name_is_still_guarded():
    """`dtype = x.dtype` may be compared later: read as a value and guarded, as before."""
    def f(x):
        dtype = x.dtype
        return (x.float() * 2).to(dtype)

    gm = specfx.trace(f, torch.randn(2))
    assert [str(s.kind) for s in gm.specializations] == ["dtype"]
    with pytest.raises(GuardError):
        gm(torch.randn(2).double())
