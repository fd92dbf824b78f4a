"""Guards in the data flow (specfx/_graph/guard_flow.py): a consumer that deletes the nodes no
output uses, or the assertion ops, keeps the guards, so a guard-breaking input still fails.

The consumers are simulated here by passes written from their documented behaviour
(tools/peers/consumer_passes.py: Sony MCT keeps only the nodes an output depends on,
ExecuTorch's RemoveGraphAssertsPass erases the assertion ops; the real pass runs when executorch
is installed). The real clients run in their own environment under .ci/run:
tests/test_executorch.py, tests/test_mct.py, tests/test_nncf.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import specfx
from specfx import GuardError
from tools.peers.consumer_passes import ASSERTS, keep_used_nodes, remove_graph_asserts


def _asserts_removed(program: torch.export.ExportedProgram) -> torch.fx.GraphModule:
    module = program.module()
    remove_graph_asserts(module)
    assert not any(node.target in ASSERTS for node in module.graph.nodes)
    return module


class Branchy(nn.Module):
    """A data branch (the issue's example) and a chunk loop, as in a small CNN."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x)
        if x.mean() > 0:
            y = y.relu()
        else:
            y = -y
        parts = [p.sum(dim=(2, 3)) for p in y.chunk(2, dim=1)]
        return self.head(torch.cat(parts, dim=1))


def _inputs():
    model = Branchy().eval()
    same = torch.rand(2, 3, 8, 8) + 1.0
    return model, same, -same


class TestPlainGraph:
    def test_output_depends_on_every_guard(self):
        model, same, _ = _inputs()
        gm = specfx.trace(model, same, policy="bool,iter")
        guards = [n for n in gm.graph.nodes if n.target in specfx.guards.GUARD_FUNCTIONS]
        joined = [n for n in gm.graph.nodes if n.target is specfx.guarded]
        assert len(guards) >= 2 and len(joined) == 1
        assert set(joined[0].args[1:]) == set(guards)
        output = next(iter(gm.graph.find_nodes(op="output")))
        assert joined[0] in output.all_input_nodes

    def test_a_consumer_that_deletes_unused_nodes_keeps_the_guards(self):
        model, same, other = _inputs()
        gm = specfx.trace(model, same, policy="bool,iter")
        pruned = keep_used_nodes(gm)
        assert sum(n.target in specfx.guards.GUARD_FUNCTIONS for n in pruned.graph.nodes) == 2
        torch.testing.assert_close(pruned(same), model(same))
        with pytest.raises(GuardError, match=r"bool\(x.mean\(\) > 0\) == True"):
            pruned(other)

    def test_without_the_join_such_a_consumer_would_lose_them(self):
        """The failure this prevents: the same pass on a graph whose output does not use the guards."""
        model, same, other = _inputs()
        gm = specfx.trace(model, same, policy="bool,iter")
        for node in list(gm.graph.nodes):
            if node.target is specfx.guarded:
                node.replace_all_uses_with(node.args[0])
                gm.graph.erase_node(node)
        gm.recompile()
        pruned = keep_used_nodes(gm)
        assert not any(n.target in specfx.guards.GUARD_FUNCTIONS for n in pruned.graph.nodes)
        assert not torch.allclose(pruned(other), model(other))  # silently the traced branch

    def test_retraced_and_copied_graphs_keep_one_join(self):
        model, same, other = _inputs()
        gm = specfx.trace(model, same, policy="bool,iter")
        for result in (specfx.trace(gm, same), copy.deepcopy(gm), torch.fx.symbolic_trace(gm)):
            assert sum(n.target is specfx.guarded for n in result.graph.nodes) == 1
            torch.testing.assert_close(result(same), model(same))
            with pytest.raises(GuardError):
                result(other)

    def test_a_graph_without_guards_has_no_join(self):
        gm = specfx.trace(nn.Linear(3, 2), torch.ones(1, 3))
        assert not any(n.target is specfx.guarded for n in gm.graph.nodes)

    def test_guards_false_has_no_join(self):
        model, same, _ = _inputs()
        gm = specfx.trace(model, same, policy="bool,iter", guards=False)
        assert not any(n.target is specfx.guarded for n in gm.graph.nodes)


class TestExportedProgram:
    def test_assert_removal_leaves_a_failing_program(self):
        model, same, other = _inputs()
        program = specfx.export(model, (same,), policy="bool,iter")
        module = _asserts_removed(program)
        torch.testing.assert_close(module(same), model(same))
        torch.testing.assert_close(module(same[:1]), model(same[:1]))  # (a dynamic batch)
        with pytest.raises(IndexError, match="index out of range"):
            module(other)

    def test_with_its_asserts_the_program_says_specfx_message_first(self):
        model, _, other = _inputs()
        same = torch.rand(2, 3, 8, 8) + 1.0
        program = specfx.export(model, (same,), policy="bool,iter")
        with pytest.raises(RuntimeError, match=r"specfx guard failed: .*bool\(x.mean\(\) > 0\) == True"):
            program.module()(other)

    def test_size_and_metadata_checks_are_in_the_data_flow_too(self):
        def f(x):
            n = x.size(0) * 2 if x.is_contiguous() else 0
            return x.sum(dim=1) * n if x.size(1) == 3 else x

        x = torch.ones(4, 3)
        program = specfx.export(f, (x,), policy="shapes,bool")
        flow = [n for n in program.graph.nodes if n.target is torch.ops.aten.index_select.default]
        assert len(flow) == 1
        checks = [n for n in program.graph.nodes if n.target is torch.ops.specfx.check.default]
        assert checks and all(n.users for n in checks)
        module = _asserts_removed(program)
        torch.testing.assert_close(module(x + 1), f(x + 1))
        strided = torch.ones(3, 4).t()  # (not contiguous: eager multiplies by 0)
        with pytest.raises(GuardError, match=r"x.is_contiguous\(\)"):  # specfx::check raises itself
            module(strided)

    def test_after_pt2e_the_flow_survives(self):
        quantize_pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
        x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")
        model, same, other = _inputs()
        program = specfx.export(model, (same,), policy="bool,iter")
        quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
        prepared = quantize_pt2e.prepare_pt2e(program.module(), quantizer)
        prepared(same)
        converted = quantize_pt2e.convert_pt2e(prepared)
        expected = model(same)
        assert (converted(same) - expected).norm() / expected.norm() < 0.1
        remove_graph_asserts(converted)
        assert (converted(same) - expected).norm() / expected.norm() < 0.1
        with pytest.raises(IndexError, match="index out of range"):
            converted(other)
