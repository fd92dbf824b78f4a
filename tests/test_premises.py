"""Premises: what torch cannot do alone on the models specfx's tests and docs use.

These tests run no specfx code. They check torch's own behaviour -- ``torch.export``
stops at a data-dependent branch, ``torch.fx.symbolic_trace`` at control flow on a
proxy -- which the specfx tests next to them take as given ("plain export fails
here, specfx exports it"). They are kept apart so that a torch release that lifts
one of these limits shows up as a failing *premise*, not as a specfx bug, and the
docs and comparisons that cite it (docs/comparison.md, tools/peers/) get
revisited.
"""

from __future__ import annotations

import pytest
import torch
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import prepare_fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from tests.test_quantization import GroupedConvNet
from tools.peers import export_routes as compare
from tools.zoo import run as zoo


class TestTorchExportAlone:
    """torch.export (non-strict) cannot export a branch or a loop on tensor data."""

    def test_fails_on_a_data_dependent_branch(self):
        with pytest.raises(GuardOnDataDependentSymNode, match="data-dependent"):
            torch.export.export(compare.DataBranch().eval(), (torch.randn(2, 8),), strict=False)

    def test_fails_on_a_moe_router(self):
        with pytest.raises(GuardOnDataDependentSymNode, match="data-dependent"):
            torch.export.export(compare.Router().eval(), (torch.randn(16, 8),), strict=False)

    def test_fails_on_mixtral_expert_loop(self):
        pytest.importorskip("transformers")
        ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))
        with pytest.raises(GuardOnDataDependentSymNode, match="data-dependent"):
            torch.export.export(compare.tiny_mixtral(), (ids, torch.ones(2, 8, dtype=torch.long)), strict=False)


class TestSymbolicTraceAlone:
    """torch.fx.symbolic_trace cannot trace control flow on shapes, nor item assignment on a proxy."""

    @pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")
    def test_stops_at_a_shape_branch_so_prepare_fx_cannot_start(self):
        with pytest.raises(torch.fx.proxy.TraceError, match="symbolically traced variables cannot be used as "
                                                            "inputs to control flow"):
            torch.fx.symbolic_trace(GroupedConvNet())
        with pytest.raises(torch.fx.proxy.TraceError, match="symbolically traced variables cannot be used as "
                                                            "inputs to control flow"):
            prepare_fx(GroupedConvNet().eval(), get_default_qconfig_mapping("x86"),
                       example_inputs=(torch.randn(1, 3, 32, 32),))

    def test_stops_at_the_swin_blocks_shifted_window_mask(self):
        built = zoo.CASES_BY_NAME["swin-block"].build()
        with pytest.raises(TypeError, match="'Proxy' object does not support item assignment"):
            torch.fx.symbolic_trace(built.model)
