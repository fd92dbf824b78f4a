"""python -m specfx."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import specfx
from specfx.cli import main

from .models import SplitCat


def scaled(x, scale=1.0):
    """A plain function for `specfx trace --function`."""
    return x * scale


def not_a_factory():
    """Returns something that is not a module."""
    return 3


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

    def test_trace_prints_code_and_table(self, tmp_path, capsys):
        """`specfx trace` builds the model, traces, checks, prints, writes code and saves."""
        out, saved = tmp_path / "graph.py", tmp_path / "graph.pt"
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)", "--policy", "iter",
                     "--check", "2", "--out", str(out), "--save", str(saved)]) == 0
        captured = capsys.readouterr()
        assert "specfx_guard_len(split, 2" in captured.out and "all guarded" in captured.out
        assert "2 check input(s) agree with eager" in captured.err
        assert "def forward(self, x)" in out.read_text()
        assert torch.load(saved, weights_only=False).specializations[0].kind == "iter"

    def test_trace_refusal_exits_1(self, capsys):
        """A refused specialization prints the explanation and exits 1."""
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)"]) == 1
        assert "specfx trace: SpecializationError: iterating over `split`" in capsys.readouterr().err

    def test_trace_function_with_kwargs(self, capsys):
        """--function traces the callable itself; --kwarg passes keyword inputs."""
        assert main(["trace", "tests.test_cli:scaled", "--function", "--input", "randn(2)",
                     "--kwarg", "scale=0.5", "--check", "1"]) == 0
        assert "mul = x * scale" in capsys.readouterr().out

    @pytest.mark.parametrize(
        "argv, message",
        [
            (["trace", "tests.models"], "must look like package.module:factory"),
            (["trace", "tests.models:Nope"], "tests.models has no attribute 'Nope'"),
            (["trace", "no_such_pkg:x"], "cannot import no_such_pkg"),
            (["trace", "tests.test_cli:scaled"], "if it is the function to trace, not a factory, pass --function"),
            (["trace", "tests.test_cli:not_a_factory"], "not an nn.Module; pass --function"),
            (["trace", "tests.models:SplitCat", "--input", "foo(1)"], "foo() is not one of randn"),
            (["trace", "tests.models:SplitCat", "--input", "randn(x)"], "arguments must be literals"),
            (["trace", "tests.models:SplitCat", "--kwarg", "oops"], "must look like name=VALUE"),
            (["trace", "tests.models:SplitCat", "--check", "-1"], "--check takes a count >= 0"),
        ],
    )
    def test_bad_arguments_are_one_line_errors(self, argv, message, capsys):
        """Bad arguments exit 2 with one line naming the problem."""
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1

    def test_parse_input(self):
        """Inputs are torch factory calls or literals, parsed without eval."""
        from specfx.cli import parse_input

        assert parse_input("zeros(2, 3, dtype=int64)").dtype == torch.int64
        assert parse_input("randn(1, 2, device='meta')").device.type == "meta"
        assert parse_input("None") is None and parse_input("0.5") == 0.5

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
