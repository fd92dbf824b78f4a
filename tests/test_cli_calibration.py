"""``specfx coverage GRAPH.pt --batches BATCHES.pt`` and ``specfx trace ... --calibration BATCHES.pt``."""

from __future__ import annotations

import torch
from torch import nn

import specfx
from specfx.cli import main


class Flatten(nn.Module):
    """A batch size read as an int under SHAPES that only flows into an op."""

    def forward(self, x):
        return x.view(x.size(0), -1)


class Rows(nn.Module):
    """A batch size the code needs as an int (range)."""

    def forward(self, x):
        return torch.stack([x[i] * i for i in range(x.size(0))])


def _save_batches(tmp_path, batches):
    path = tmp_path / "batches.pt"
    torch.save(batches, path)
    return str(path)


class TestCoverageCommand:
    def test_prints_the_table_and_exits_1_when_a_batch_fails(self, tmp_path, capsys):
        """The table of specfx.coverage, exit code 1 when a batch fails, 0 when all pass."""
        gm = specfx.trace(Flatten(), torch.ones(2, 3), policy="shapes")
        graph = tmp_path / "graph.pt"
        torch.save(gm, graph)
        batches = [torch.ones(2, 3), {"x": torch.ones(4, 3)}, (torch.ones(2, 5),)]
        assert main(["coverage", str(graph), "--batches", _save_batches(tmp_path, batches)]) == 1
        out = capsys.readouterr().out
        assert out == str(specfx.coverage(gm, batches)) + "\n"
        assert out.splitlines()[0] == "specfx coverage: 2 of 3 batches pass every guard; failing: batch 1"
        assert main(["coverage", str(graph), "--batches", _save_batches(tmp_path, batches[::2])]) == 0

    def test_unreadable_batches_are_one_line_errors(self, tmp_path, capsys):
        """A file that is no list of batches: one line, exit code 2."""
        graph = tmp_path / "graph.pt"
        torch.save(specfx.trace(Flatten(), torch.ones(2, 3)), graph)
        assert main(["coverage", str(graph), "--batches", _save_batches(tmp_path, torch.ones(2))]) == 2
        assert capsys.readouterr().err.strip().endswith("holds Tensor, not a non-empty list of batches")
        assert main(["coverage", str(graph), "--batches", str(tmp_path / "missing.pt")]) == 2
        assert capsys.readouterr().err.startswith("specfx coverage: cannot read the batches in ")

    def test_a_graph_or_a_foreign_file_as_batches_says_what_it_is(self, tmp_path, capsys):
        """Files swapped (the graph given as batches) or not written by torch.save: one line saying so, in
        specfx's words (never torch's weights-only essay or a KeyError), exit code 2."""
        graph, text = tmp_path / "graph.pt", tmp_path / "notes.pt"
        torch.save(specfx.trace(Flatten(), torch.ones(2, 3)), graph)
        text.write_text("hello")
        batches = _save_batches(tmp_path, [torch.ones(2, 3)])
        assert main(["coverage", batches, "--batches", str(graph)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"specfx coverage: cannot read the batches in {graph}: it holds a saved graph (a "
                              f"GraphModule, which names specfx.rebuild_graph_module), not tensors; a file of "
                              f"batches holds tensors only (save a list of tensors") and err.count("\n") == 1
        assert main(["trace", "tests.test_cli_calibration:Flatten", "--calibration", str(graph)]) == 2
        assert "specfx trace: cannot read the batches in " in capsys.readouterr().err
        assert main(["coverage", str(graph), "--batches", str(text)]) == 2
        assert capsys.readouterr().err.startswith(f"specfx coverage: cannot read the batches in {text}: it is not "
                                                  f"a file torch.save wrote (")
        assert main(["coverage", str(text), "--batches", batches]) == 2
        assert capsys.readouterr().err == f"specfx coverage: cannot load {text}: it is not a file torch.save wrote\n"


class TestTraceCalibration:
    def test_one_graph_for_the_set(self, tmp_path, capsys):
        """--calibration without --input: the first batch is the example; sizes stay symbolic."""
        path = _save_batches(tmp_path, [torch.ones(2, 3), torch.ones(4, 3)])
        assert main(["trace", "tests.test_cli_calibration:Flatten", "--policy", "shapes", "--calibration", path]) == 0
        out = capsys.readouterr().out
        assert "view = x.view(size, -1)" in out
        assert "no specializations" in out

    def test_a_decision_that_differs_exits_1_naming_the_batch(self, tmp_path, capsys):
        """range() of a size that differs: exit code 1, the refusal names the batch."""
        path = _save_batches(tmp_path, [torch.ones(3, 2), torch.ones(4, 2)])
        assert main(["trace", "tests.test_cli_calibration:Rows", "--policy", "shapes", "--calibration", path]) == 1
        assert "batch 1 of the calibration set" in capsys.readouterr().err
