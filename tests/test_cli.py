"""python -m specfx."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import torch

import specfx
from specfx.cli import main

from .models import SplitCat

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def scaled(x, scale=1.0):
    """A plain function for `specfx trace --function`."""
    return x * scale


def not_a_factory():
    """Returns something that is not a module."""
    return 3


def _leave_mark(path):
    """What an untrusted file's payload does when it is unpickled: here, create a file."""
    pathlib.Path(path).write_text("ran")
    return "payload"


class Payload:
    """An object whose unpickling runs code (_leave_mark), as a malicious file's would."""

    def __init__(self, mark):
        self.mark = str(mark)

    def __reduce__(self):
        return (_leave_mark, (self.mark,))


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
        """`specfx explain FILE` prints the table of a saved graph, the same as explain() of the graph."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        torch.save(gm, tmp_path / "g.pt")
        assert main(["explain", str(tmp_path / "g.pt")]) == 0
        assert capsys.readouterr().out == specfx.explain(gm) + "\n"


class TestExplainLoadsSafely:
    def test_file_code_does_not_run(self, tmp_path, capsys):
        """By default nothing in the file runs: a payload next to the graph is not executed."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        mark = tmp_path / "ran.txt"
        torch.save({"graph": gm, "extra": Payload(mark)}, tmp_path / "bundle.pt")
        assert main(["explain", str(tmp_path / "bundle.pt")]) == 0
        assert capsys.readouterr().out == specfx.explain(gm) + "\n"
        assert not mark.exists()

    def test_unsafe_load_runs_the_file(self, tmp_path, capsys):
        """--unsafe-load really loads the file (its payload runs): the flag does what its help warns of."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        mark = tmp_path / "ran.txt"
        torch.save({"extra": Payload(mark), "graph": gm}, tmp_path / "bundle.pt")
        main(["explain", "--unsafe-load", str(tmp_path / "bundle.pt")])
        assert mark.read_text() == "ran"

    def test_graph_without_records_needs_the_flag(self, tmp_path, capsys):
        """A graph that lost its records is refused safely, naming --unsafe-load; with it, explained from guards."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        copied = torch.fx.GraphModule(gm, gm.graph)  # as FX quantization leaves it
        torch.save(copied, tmp_path / "q.pt")
        assert main(["explain", str(tmp_path / "q.pt")]) == 2
        err = capsys.readouterr().err
        assert "holds no specfx records that can be read without loading it" in err
        assert "pass --unsafe-load" in err
        assert main(["explain", "--unsafe-load", str(tmp_path / "q.pt")]) == 0
        assert capsys.readouterr().out == specfx.explain(copied) + "\n"

    @pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.pt")))
    def test_files_saved_by_every_release(self, name, capsys, monkeypatch):
        """Every graph kept under tests/fixtures (one per release and kind) is explained without
        running it, as explain() of the loaded graph reads it."""
        monkeypatch.syspath_prepend(str(FIXTURES))  # (loading imports the model's module)
        assert main(["explain", str(FIXTURES / name)]) == 0
        safe = capsys.readouterr().out
        assert safe == specfx.explain(torch.load(FIXTURES / name, weights_only=False)) + "\n"

    def test_records_file(self, tmp_path, capsys):
        """A file holding only the records (torch.save(specfx.specializations(gm), FILE)) is explained."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy=specfx.Policy(iter=True, shapes=True))
        torch.save(specfx.specializations(gm), tmp_path / "records.pt")
        assert main(["explain", str(tmp_path / "records.pt")]) == 0
        assert capsys.readouterr().out == specfx.explain(gm) + "\n"

    def test_records_of_every_value_type(self, tmp_path):
        """Records holding dtypes, devices, tuples and floats read back equal."""
        from specfx._graph.safe_load import read_specializations

        def f(x, mask=None):
            if x.dtype == torch.float32 and x.device.type == "cpu" and mask is None:
                return x * float(x.sum()) * x.shape[0]
            return x

        gm = specfx.trace(f, torch.ones(2, 3), policy="all")
        torch.save(gm, tmp_path / "g.pt")
        assert read_specializations(str(tmp_path / "g.pt")) == gm.specializations
        assert len({type(s.value) for s in gm.specializations}) >= 3

    def test_graph_saved_by_0_1(self, capsys):
        """The graph pickled by specfx 0.1.0 (tests/fixtures) is explained without loading it."""
        fixture = pathlib.Path(__file__).parent / "fixtures" / "graph_0.1.0.pt"
        assert main(["explain", str(fixture)]) == 0
        summary = capsys.readouterr().out.splitlines()[0]
        assert summary == "specfx: 2 specializations from 2 source lines (bool: 1, unpack: 1), all guarded"

    def test_not_a_torch_file(self, tmp_path, capsys):
        """A file that is not a torch.save archive is a one-line refusal, exit code 2."""
        (tmp_path / "x.pt").write_bytes(b"not a zip")
        assert main(["explain", str(tmp_path / "x.pt")]) == 2
        assert "is not a torch.save archive" in capsys.readouterr().err

    def test_help_says_what_the_flag_risks(self, capsys):
        """The flag's help says it runs code from the file."""
        with pytest.raises(SystemExit):
            main(["explain", "--help"])
        assert "runs any code the file contains" in " ".join(capsys.readouterr().out.split())


class TestCommands:
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
        assert "specfx trace: SpecializationError: iterating over `x`" in capsys.readouterr().err

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
            (["trace", "tests.models:SplitCat", "--input", "randn(2, **{})"], "arguments must be literals"),
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
