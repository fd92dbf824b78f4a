"""python -m specfx."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import specfx
from specfx.cli import main

from .models import SplitCat


class TestCLI:
    def test_demo_runs_and_shows_everything(self, capsys):
        """The demo prints code, the explain table, a refusal and guards firing."""
        assert main(["demo"]) == 0
        out = capsys.readouterr().out
        assert "specfx_guard_len(split, 2" in out
        assert "specfx: 1 specialization from 1 source line (iter: 1), all guarded" in out
        assert "Specialize.ITER_LEN is not allowed" in out
        assert out.count("GuardError") >= 2 and "equal to eager = True" in out

    def test_explain_saved_graph(self, tmp_path, capsys):
        """`specfx explain FILE` prints the table of a saved graph."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        torch.save(gm, tmp_path / "g.pt")
        assert main(["explain", str(tmp_path / "g.pt")]) == 0
        assert capsys.readouterr().out.startswith("specfx: 1 specialization")

    def test_explain_missing_file(self, tmp_path, capsys):
        """A missing file is a one-line error and exit code 2."""
        assert main(["explain", str(tmp_path / "nope.pt")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("specfx explain: cannot load") and err.count("\n") == 1

    def test_no_command_prints_help(self, capsys):
        """No sub-command prints the help and exits 2."""
        assert main([]) == 2
        assert "demo" in capsys.readouterr().out

    def test_bad_command_exits_nonzero(self):
        """An unknown sub-command is an argparse error."""
        with pytest.raises(SystemExit) as caught:
            main(["frobnicate"])
        assert caught.value.code == 2

    def test_module_entry_point(self):
        """`python -m specfx --help` works as a program."""
        done = subprocess.run([sys.executable, "-m", "specfx", "--help"], capture_output=True, text=True)
        assert done.returncode == 0 and "explain" in done.stdout
