"""NNCF (torch.fx backend) quantizes a specfx program and keeps its guards.

``nncf.quantize`` on ``specfx.export(...).module()`` keeps the program's assertions and the
data flow that makes its output depend on them (``specfx.guarded``): the quantized module
matches eager within NNCF's usual accuracy on the traced path and raises specfx's message on
an input that breaks a decision. The working call exports static shapes
(``dynamic_shapes=None``): with a dynamic batch read by a view (``y.view(y.size(0), -1)``)
NNCF 3.4 fails on the ``sym_size`` node, for a stock ``torch.export`` with ``Dim.AUTO`` alike.

Runs where nncf (and the torchao its torch.fx backend imports) is installed: .ci/run's
clients stage, in its own environment.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.export import Dim

import specfx
from tests.test_guard_flow import Branchy

pytest.importorskip("torchao")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    nncf = pytest.importorskip("nncf")

# NNCF warns that its torch.fx backend is experimental, and of small data sets: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning")


def _sqnr(reference: torch.Tensor, approximation: torch.Tensor) -> float:
    return float(10 * torch.log10(reference.pow(2).sum() / (reference - approximation).pow(2).sum()))


def _batches():
    generator = torch.Generator().manual_seed(0)
    return [torch.rand(2, 3, 8, 8, generator=generator) + 1.0 for _ in range(4)]


def test_quantized_program_matches_and_keeps_the_guard():
    model = Branchy().eval()
    batches = _batches()
    program = specfx.export(model, (batches[0],), policy="bool,iter", dynamic_shapes=None)
    quantized = nncf.quantize(program.module(), nncf.Dataset(batches))
    fresh = torch.rand(2, 3, 8, 8) + 1.0
    with torch.no_grad():
        assert _sqnr(model(fresh), quantized(fresh)) > 25.0  # 8-bit weights and activations
        with pytest.raises(RuntimeError, match=r"specfx guard failed: .*bool\(x.mean\(\) > 0\) == True"):
            quantized(-fresh)
    assert any(node.target is torch.ops.aten.index_select.default for node in quantized.graph.nodes)


class Flattening(nn.Module):
    def __init__(self, branch: bool):
        super().__init__()
        torch.manual_seed(0)
        self.branch = branch
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 2)

    def forward(self, x):
        y = self.conv(x)
        if self.branch:
            y = y.relu() if x.mean() > 0 else -y
        return self.head(y.view(y.size(0), -1))


def test_a_dynamic_batch_fails_in_nncf_for_stock_export_too():
    """NNCF's own limitation, not specfx's: the same error for torch.export with Dim.AUTO."""
    batches = _batches()
    errors = []
    for program in (specfx.export(Flattening(branch=True).eval(), (batches[0],), policy="bool"),
                    torch.export.export(Flattening(branch=False).eval(), (batches[0],),
                                        dynamic_shapes={"x": {0: Dim.AUTO}})):
        with pytest.raises(NotImplementedError, match="isempty") as caught:  # (on the sym_size node)
            nncf.quantize(program.module(), nncf.Dataset(batches))
        errors.append(f"{type(caught.value).__name__}: {caught.value}")
    assert errors[0] == errors[1]
    # static shapes: the working call
    model = Flattening(branch=True).eval()
    program = specfx.export(model, (batches[0],), policy="bool", dynamic_shapes=None)
    quantized = nncf.quantize(program.module(), nncf.Dataset(batches))
    with torch.no_grad():
        assert _sqnr(model(batches[1]), quantized(batches[1])) > 25.0
