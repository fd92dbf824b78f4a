"""The README's main job: trace two models plain FX cannot, show the code, the
report and a guard catching an input the graph does not cover.

The models live in this file so that source locations point here, as they
would point into a user's model file.
"""

# No `from __future__ import annotations`: torch.fx prints real annotations as written
# (`x : torch.Tensor`), string ones mangled (`_torch_Tensor_`), on the demo's first screen.
from typing import Callable

import torch
from torch import nn

import specfx
from specfx import Policy, Specialize


class TestModule(nn.Module):
    """The seed example: split into chunks, then ``*``-unpack them into a call."""

    def call_cat(self, *args: torch.Tensor) -> torch.Tensor:
        return torch.cat(args, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, 2, dim=1)
        return self.call_cat(*parts)


class GatedBlock(nn.Module):
    """Branches on the batch size and on the data, as detection heads do."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BOOL on a shape predicate: the graph stays valid for every batch size > 1
        if x.shape[0] > 1:
            x = x - x.mean(dim=0, keepdim=True)
        y = self.proj(x)
        # BOOL on data: guarded, so an input that needs the other branch cannot silently skip it
        if y.abs().max() > 10:
            y = y / 10
        return y


def _section(title: str, write: Callable[[str], None]) -> None:
    write(f"\n=== {title} " + "=" * max(0, 66 - len(title)))


def run(write: Callable[[str], None] = print) -> None:
    """Run the demo, writing its report through ``write``."""
    torch.manual_seed(0)
    _section("plain torch.fx.symbolic_trace on the seed example", write)
    try:
        torch.fx.symbolic_trace(TestModule())
    except Exception as error:  # the failure this project exists for
        write(f"{type(error).__name__}: {str(error).splitlines()[0][:100]}...")

    _section("specfx.trace without a policy: an explained refusal", write)
    try:
        specfx.trace(TestModule(), torch.randn(1, 4, 10, 10))
    except specfx.SpecializationError as error:
        write(str(error))

    _section("specfx.trace(..., policy=Policy(Specialize.ITER_LEN))", write)
    gm = specfx.trace(TestModule(), torch.randn(1, 4, 10, 10), policy=Policy(Specialize.ITER_LEN))
    write(gm.code.strip())
    write("")
    write(specfx.explain(gm))
    other = torch.randn(3, 4, 7, 7)
    write(f"\nanother batch and spatial size: equal to eager = {torch.equal(gm(other), TestModule()(other))}")
    try:
        gm(torch.randn(1, 6, 10, 10))
    except specfx.GuardError as error:
        write(f"6 channels (3 chunks) -> GuardError:\n{error}")

    _section("a branching model, Policy(bool=True)", write)
    block = GatedBlock().eval()
    example = torch.randn(4, 8)
    gm = specfx.trace(block, example, policy=Policy(bool=True), check_inputs=[torch.randn(2, 8)])
    write(gm.code.strip())
    write("")
    write(specfx.explain(gm))
    try:
        gm(torch.randn(4, 8) * 1000)
    except specfx.GuardError as error:
        write(f"\nlarge activations take the other branch -> GuardError:\n{error}")
