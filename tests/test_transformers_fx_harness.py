"""tools/peers/transformers_fx.py on a small tree laid out as transformers' (its mixin
calling ``symbolic_trace(model, input_names)``): the table per set and mode, the failures
grouped by first line, and nothing written into the tree."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent

COMMON = '''
import unittest
import torch
from transformers.utils.fx import symbolic_trace


class ModelTesterMixin:
    fx_compatible = False
    all_model_classes = ()

    def test_torch_fx(self):
        self._check()

    def test_torch_fx_output_loss(self):
        self._check()

    def _check(self):
        if not self.fx_compatible:
            self.skipTest("not fx compatible")
        for model_class in self.all_model_classes:
            model = model_class().eval()
            inputs = {"x": torch.randn(2, 4)}
            traced = symbolic_trace(model, list(inputs))
            with torch.no_grad():
                self.assertTrue(torch.allclose(traced(**inputs), model(**inputs)))
'''

TOY = '''
import unittest
import torch
from torch import nn
from ...test_modeling_common import ModelTesterMixin


class SoftmaxInForward(nn.Module):
    def forward(self, x):
        return nn.Softmax(dim=-1)(x) * x.shape[1]


class LayerBuiltInForward(nn.Module):
    """Eager differs from itself (new random weights per call): the test cannot judge a trace."""

    def forward(self, x):
        return nn.Linear(4, 4)(x)


class InferenceModeRegion(nn.Module):
    def forward(self, x):
        with torch.inference_mode():
            return x * 2


class ClaimedTest(ModelTesterMixin, unittest.TestCase):
    fx_compatible = True
    all_model_classes = (SoftmaxInForward,)


class ForcedTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (InferenceModeRegion,)


class NotRunnableTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (LayerBuiltInForward,)
'''


def _tree(root: Path) -> Path:
    for folder in ("tests", "tests/models", "tests/models/toy"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "__init__.py").write_text("")
    (root / "tests" / "test_modeling_common.py").write_text(textwrap.dedent(COMMON))
    (root / "tests" / "models" / "toy" / "test_modeling_toy.py").write_text(textwrap.dedent(TOY))
    return root


def _files(root: Path):
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


def test_table_failures_by_first_line_and_an_untouched_tree(tmp_path):
    tree = _tree(tmp_path / "transformers")
    before = _files(tree)
    run = subprocess.run(
        [sys.executable, "-m", "tools.peers.transformers_fx", str(tree), "--set", "claimed", "forced",
         "--mode", "graph", "specializer", "hf"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "3 model test classes; 0 test modules not importable" in out
    claimed = out[out.index("claimed set:"):out.index("forced set:")]
    forced = out[out.index("forced set:"):]
    # the claimed class: a module built in forward, which specfx installs on the graph
    assert "  graph            2     2     0      0     0" in claimed
    assert "  specializer      2     2     0      0     0" in claimed
    # the forced classes: eager runs first, and only the tests it passes run in the other modes
    # (a layer built in forward differs from itself between two eager calls)
    assert "  eager            4     2     2      0     0" in forced
    assert "  graph            2     0     0      2     0" in forced  # (a refusal: an error, not a failure)
    assert ("      2  specfx.errors.SpecializationError: torch.inference_mode() inside the traced code: "
            "a graph cannot record entering inference mode.") in forced
    assert "test_modeling_toy::ForcedTest::test_torch_fx_output_loss" in forced
    assert _files(tree) == before  # no bytecode, no file written into the tree


def test_shards_cover_the_set_once(tmp_path):
    """``--shard K/N`` runs every N-th class from the K-th: two shards of the forced set run
    its two classes once each, and neither runs the other's."""
    tree = _tree(tmp_path / "transformers")
    seen = []
    for shard in ("0/2", "1/2"):
        run = subprocess.run(
            [sys.executable, "-m", "tools.peers.transformers_fx", str(tree), "--set", "forced", "--mode", "eager",
             "--shard", shard, "-v"],
            cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
        assert run.returncode == 0, run.stderr[-3000:]
        assert "forced set: 1 test classes, 2 tests" in run.stdout
        seen.append({line.split()[3].split("::")[1] for line in run.stdout.splitlines()
                     if line.startswith("  eager ") and "::" in line})
    assert sorted(map(sorted, seen)) == [["ForcedTest"], ["NotRunnableTest"]]
    bad = subprocess.run([sys.executable, "-m", "tools.peers.transformers_fx", str(tree), "--shard", "2/2"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "--shard 2/2: expected K/N with 0 <= K < N" in bad.stderr
