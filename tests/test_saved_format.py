"""The saved-graph format: what a pickled specfx graph names is a frozen list of public paths.

A pickle names every class and function it needs by module path and name; those paths are
a file format. Each is public (`specfx.X`, `specfx.guards.X`), listed in docs/guarantees.md
("Saved graphs name only frozen paths"), and kept importable by every later release; the
private modules behind them may move freely. Files saved by 0.1 and 0.2 name private paths
of their time, which stay loadable (tests/test_saved_graphs.py loads those fixtures).
"""

from __future__ import annotations

import io
import pathlib
import pickle
import pickletools
import re
from typing import Any, Set, Tuple

import torch
from torch import nn

import specfx
from specfx import Policy, Specializer

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "guarantees.md"


def _frozen_in_docs() -> Set[Tuple[str, str]]:
    text = DOCS.read_text()
    section = text[text.index("## Saved graphs name only frozen paths"):]
    section = section[: section.find("\n## ", 4)] if "\n## " in section[4:] else section
    return set(re.findall(r"`(specfx(?:\.guards)?)\.(\w+)`", section))


def _named(obj: Any) -> Set[Tuple[str, str]]:
    """Every (module, name) a pickle of ``obj`` (torch.save's protocol) looks up, specfx's only,
    plus what its generated code imports when it is loaded."""
    data = pickle.dumps(obj, protocol=2)
    found = set()
    for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
        if opcode.name == "GLOBAL":
            module, name = arg.split(" ", 1)
            if module.split(".")[0] == "specfx":
                found.add((module, name))
    for module, names in re.findall(rb"from (specfx[\w.]*) import ([\w ,]+?)(?: as |\\n|$)", data):
        found.update((module.decode(), n.strip()) for n in names.decode().split(","))
    return found


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, extra=None):
        a, b = torch.chunk(self.lin(x), 2, dim=1)
        if x.sum() > 0:
            a = a * 2
        if extra is not None:
            a = a + extra["bias"]
        try:
            c = a @ b.t()
        except RuntimeError:
            c = a
        return {"out": c, "parts": [a, b]}


class Flagged(nn.Module):
    def forward(self, x, flag=True):
        return x * 2 if flag else x


TWO = torch.tensor(2.0)


class Defaulted(nn.Module):
    def forward(self, x, scale=TWO):
        return x * scale


class Autocast(nn.Module):
    def forward(self, x):
        return x * 2 if torch.is_autocast_enabled("cpu") else x


class Sliced(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(10.0))

    def forward(self, x):
        return x + self.table[: x.shape[1]]


def _kinds_of_graphs():
    x = torch.randn(3, 4)
    plain = specfx.trace(Branchy(), (x,), policy=Policy(iter=True, bool=True))
    structured = specfx.trace(Branchy(), (x, {"bias": torch.ones(2)}), policy=Policy(iter=True, bool=True))
    spec = Specializer(Branchy(), Policy(iter=True, bool=True))
    spec(torch.ones(3, 4))
    spec(-torch.ones(3, 4))
    retraced = torch.fx.symbolic_trace(plain)
    concrete = specfx.trace(Flagged(), (x,), concrete_args={"flag": True})
    defaults = specfx.trace(Defaulted(), (x,))
    autocast = specfx.trace(Autocast(), (x,), policy=Policy(bool=True))
    sliced = specfx.trace(Sliced(), (x,), policy=Policy(shapes=True))
    return {"plain": plain, "structured": structured, "retraced": retraced, "concrete_args": concrete,
            "tensor default": defaults, "autocast": autocast, "buffer slice": sliced, "specializer": spec,
            **{f"variant{i}": gm for i, gm in enumerate(spec.variants)}}


def test_docs_list_the_frozen_paths():
    """docs/guarantees.md lists the frozen paths, and each is importable as named."""
    frozen = _frozen_in_docs()
    assert ("specfx", "Specialization") in frozen and ("specfx.guards", "GuardKind") in frozen
    for module, name in frozen:
        assert getattr(__import__(module, fromlist=[name]), name) is not None


def test_fresh_graphs_name_only_frozen_paths():
    """A freshly saved graph of every kind names only paths in the frozen list."""
    frozen = _frozen_in_docs()
    graphs = _kinds_of_graphs()
    assert len(graphs) >= 5  # plain, structured, re-traced and two Specializer variants
    for kind, gm in graphs.items():
        named = _named(gm)
        assert named, kind
        assert named <= frozen, (kind, sorted(named - frozen))


def test_a_loaded_graph_saves_the_same_paths(tmp_path):
    """Save, load, save again: the second file names the same frozen paths."""
    gm = _kinds_of_graphs()["structured"]
    torch.save(gm, tmp_path / "g.pt")
    loaded = torch.load(tmp_path / "g.pt", weights_only=False)
    assert _named(loaded) == _named(gm)


def test_old_private_paths_still_resolve():
    """The private paths that 0.1 and 0.2 pickles name resolve to today's public objects."""
    import importlib

    expected = {
        ("specfx._decisions", "Specialization"): specfx.Specialization,
        ("specfx._guards", "Specialization"): specfx.Specialization,
        ("specfx._policy", "Policy"): specfx.Policy,
        ("specfx._policy", "Specialize"): specfx.Specialize,
        ("specfx._source", "SourceLocation"): specfx.SourceLocation,
        ("specfx._tracer", "SpecTracer"): specfx.SpecTracer,
        ("specfx._records", "keep_records"): specfx.keep_records,
        ("specfx._records", "rebuild_graph_module"): specfx.rebuild_graph_module,
        ("specfx._caught", "_caught_from_names"): specfx.rebuild_caught,
    }
    for (module, name), obj in expected.items():
        assert getattr(importlib.import_module(module), name) is obj
