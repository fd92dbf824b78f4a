"""ExecuTorch: a specfx program lowered to a ``.pte`` and run by ExecuTorch's runtime keeps its guards.

``to_executorch()`` always runs ExecuTorch's ``RemoveGraphAssertsPass``, which erases every
``aten._assert_async`` (specfx's data guards in an exported program). The program's output
depends on the guards' conditions (``specfx.guarded``, specfx/_graph/guard_flow.py), so the
``.pte`` still computes them, and an input that breaks one makes the runtime's ``index_select``
kernel fail: the call raises instead of returning the traced branch's answer.

Runs where executorch is installed (.ci/run's ExecuTorch stage, its own environment); the
main suite simulates the pass in tests/test_guard_flow.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import specfx
from tests.test_guard_flow import Branchy

pytest.importorskip("executorch.exir")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (the runtime's bindings warn that their API is experimental)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

# ExecuTorch's lowering warns of its own deprecations (importlib.resources, ...): not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _pte(program: torch.export.ExportedProgram) -> bytes:
    """The supported route: XNNPACK-lowered, then ExecuTorch's own passes, as a .pte buffer."""
    return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


class _Loaded:
    """A .pte's forward, holding the buffer and the program it runs from (the runtime reads
    them in place: a freed buffer would crash the call)."""

    def __init__(self, buffer: bytes) -> None:
        self.buffer = buffer
        self.program = Runtime.get().load_program(buffer)
        self.forward = self.program.load_method("forward")

    def execute(self, inputs: list) -> list:
        return self.forward.execute(inputs)


def _method(buffer: bytes) -> _Loaded:
    return _Loaded(buffer)


@pytest.fixture(scope="module")
def model():
    return Branchy().eval()  # a data branch and a chunk loop


def test_stock_export_cannot_capture_the_model(model):
    with pytest.raises(Exception, match="(?i)data-dependent|data dependent"):
        torch.export.export(model, (torch.rand(2, 3, 16, 16),), strict=False)


def test_pte_matches_eager_and_raises_on_the_other_branch(model):
    x = torch.rand(2, 3, 16, 16) + 0.5
    program = specfx.export(model, (x,), policy="bool,iter", dynamic_shapes=None)
    method = _method(_pte(program))
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(method.execute([x])[0], expected, atol=1e-4, rtol=1e-4)
    other = torch.rand(2, 3, 16, 16) - 1.5  # x.mean() < 0: eager takes the other branch
    with pytest.raises(RuntimeError, match="execute"):
        method.execute([other])
    # the assertion the runtime lacks is specfx's, and the exported module still says it
    with pytest.raises(RuntimeError, match=r"specfx guard failed: .*bool\(x.mean\(\) > 0\) == True"):
        program.module()(other)


def test_the_assertions_are_gone_and_the_flow_remains(model):
    """What the .pte runs: no assertion op, the guard's condition feeding the output."""
    x = torch.rand(2, 3, 16, 16) + 0.5
    program = specfx.export(model, (x,), policy="bool,iter", dynamic_shapes=None)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
    targets = {str(node.target) for node in lowered.exported_program().graph.nodes if node.op == "call_function"}
    assert not any("assert" in target for target in targets)
    assert any("index_select" in target for target in targets)


def test_a_run_time_metadata_read_is_refused_when_lowered():
    """A decision on what only the Python input knows (contiguity, type, grad mode) is asked per
    call by the custom operator specfx::check, which ExecuTorch's runtime has no kernel for:
    lowering refuses (no silently dropped check)."""

    def f(x):
        return x * 2 if x.is_contiguous() else x

    program = specfx.export(f, (torch.ones(4, 3),), policy="bool", dynamic_shapes=None)
    with pytest.raises(RuntimeError, match="specfx::check"):
        _pte(program)
