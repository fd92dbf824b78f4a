"""Measure the table of docs/comparison.md: specfx beside the other ways to get a graph.

    python -m tools.peers.comparison          # print the table
    python -m tools.peers.comparison --check  # exit 1 unless docs/comparison.md holds this table

Each tracer gets the same tiny models, each with an example input and an input
that takes another path through the model's Python code. A cell says what
happened, in this order: tracing failed; or the traced artifact, run on the other
input, raised (it checks its inputs), returned eager's result, or returned
something else without a word (silently wrong). The state row says what tracing
left changed in a model holding a BatchNorm in training mode and drawing random
numbers, and the last what kind of graph a Linear and a ReLU become.
tests/test_docs.py runs the check, so the page cannot drift from what
the tracers do.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import sys
import warnings
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import specfx
from tools import CHECKOUT

DOC = CHECKOUT / "docs" / "comparison.md"
BEGIN, END = "<!-- begin: python -m tools.peers.comparison -->", "<!-- end: python -m tools.peers.comparison -->"


class Unpack(nn.Module):
    """Unpacks a split into a call: the number of pieces is read from the example."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, 2, dim=1)
        return torch.cat([*parts], dim=1) * len(parts)


class DataBranch(nn.Module):
    """Branches on tensor data."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else -x


class ShapeBranch(nn.Module):
    """Branches on a shape read as a Python int."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=0) if x.shape[0] > 1 else x


class ItemScale(nn.Module):
    """Reads a Python number from data (.item())."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.max().item()


class Stateful(nn.Module):
    """A BatchNorm in training mode and a random draw: what tracing may change."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) + torch.rand(x.shape)


# model, example input, input that takes another path
MODELS: Dict[str, Tuple[Callable[[], nn.Module], torch.Tensor, torch.Tensor]] = {
    "unpacking a split (`a, b = torch.split(...)`, `*parts`, `len()`)":
        (Unpack, torch.ones(2, 4), torch.ones(2, 6)),
    "`if` on tensor data": (DataBranch, torch.ones(3), -torch.ones(3)),
    "`if` on a shape read as an int": (ShapeBranch, torch.ones(4, 3), torch.ones(1, 3)),
    "a number read from data (`.item()`)": (ItemScale, torch.ones(3), torch.full((3,), 2.0)),
}


def _symbolic_trace(model: nn.Module, x: torch.Tensor) -> Callable[..., Any]:
    return torch.fx.symbolic_trace(model)


def _jit_trace(model: nn.Module, x: torch.Tensor) -> Callable[..., Any]:
    return torch.jit.trace(model, (x,), check_trace=False)


def _make_fx(model: nn.Module, x: torch.Tensor) -> Callable[..., Any]:
    return make_fx(model)(x)


def _export(model: nn.Module, x: torch.Tensor) -> Callable[..., Any]:
    return torch.export.export(model, (x,)).module()


def _specfx(model: nn.Module, x: torch.Tensor) -> Callable[..., Any]:
    return specfx.trace(model, x, policy=specfx.Policy(specfx.Specialize.ALL))


TRACERS: Dict[str, Callable[[nn.Module, torch.Tensor], Callable[..., Any]]] = {
    "torch.fx.symbolic_trace": _symbolic_trace,
    "torch.jit.trace": _jit_trace,
    "make_fx": _make_fx,
    "torch.export": _export,
    "specfx (`Policy(Specialize.ALL)`)": _specfx,
}


def _outcome(tracer: Callable[[nn.Module, torch.Tensor], Callable[..., Any]], build: Callable[[], nn.Module],
             example: torch.Tensor, other: torch.Tensor) -> str:
    model = build().eval()
    try:
        traced = tracer(model, example.clone())
    except Exception:
        return "fails to trace"
    try:
        result = traced(other.clone())
    except Exception as error:
        return f"raises ({type(error).__name__})"
    expected = model(other.clone())
    same = isinstance(result, torch.Tensor) and result.shape == expected.shape and torch.equal(result, expected)
    return "right answer" if same else "**silently wrong**"


def _state_change(tracer: Callable[[nn.Module, torch.Tensor], Callable[..., Any]]) -> str:
    torch.manual_seed(0)
    model = Stateful().train()
    example = torch.randn(8, 4)
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    try:
        tracer(model, example)
    except Exception:
        return "fails to trace"
    changed = [name for name, value in model.state_dict().items() if not torch.equal(value, before[name])]
    if not torch.equal(torch.get_rng_state(), rng):
        changed.append("RNG advanced")
    return ", ".join(f"`{name}`" if "." in name else name for name in changed) or "unchanged"


def _output_kind(tracer: Callable[[nn.Module, torch.Tensor], Callable[..., Any]]) -> str:
    traced = tracer(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), torch.ones(2, 3))
    if isinstance(traced, torch.jit.ScriptModule):
        return "TorchScript"
    graph = getattr(traced, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return type(traced).__name__
    aten = any(isinstance(node.target, torch._ops.OpOverload) for node in graph.nodes)
    return "FX graph of aten ops" if aten else "FX graph of torch-level calls and modules"


def measure() -> List[List[str]]:
    """The table's rows: a header, one row per model, the state row."""
    rows = [["", *TRACERS]]
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")  # jit.trace's TracerWarnings; make_fx prints failed graphs
        for label, (build, example, other) in MODELS.items():
            rows.append([label, *(_outcome(tracer, build, example, other) for tracer in TRACERS.values())])
        rows.append(["model state and RNG after tracing", *(_state_change(tracer) for tracer in TRACERS.values())])
        rows.append(["what you get", *(_output_kind(tracer) for tracer in TRACERS.values())])
    return rows


def render(rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join([BEGIN, *lines, END])


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless docs/comparison.md holds this table")
    args = parser.parse_args(argv)
    table = render(measure())
    if args.check:
        text = DOC.read_text()
        current = text[text.index(BEGIN): text.index(END) + len(END)]
        if current != table:
            print("docs/comparison.md is out of date; its table should be:\n" + table)
            return 1
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
