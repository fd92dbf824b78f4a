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


class Heads(torch.nn.Module):
    """A submodule that needs ITER_LEN (its forward iterates a split)."""

    def forward(self, x):
        return torch.cat([part * 2 for part in torch.split(x, 2, dim=1)], dim=1)


class WithHeads(torch.nn.Module):
    """Heads inside a model: `--scope 'heads=iter'` grants the flag there only."""

    def __init__(self):
        super().__init__()
        self.heads = Heads()
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.heads(x))


def repeated(x, times=2):
    """A Python int that sets a loop count: --concrete-arg bakes it in."""
    return torch.cat([x for _ in range(times)])


class Broken(torch.nn.Module):
    """A model whose forward fails on every input (a shape mistake of its own)."""

    def forward(self, x):
        return x.view(3, -1, 7)


class Dropped(torch.nn.Module):
    """A model with dropout: traced in training mode unless --eval."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.linear(x))


class Positive(torch.nn.Module):
    """Branches on data: the example (ones) takes the branch, a random input does not."""

    def forward(self, x):
        return x * 2 if bool(x.min() > 0.99) else x


def failing_factory():
    """A factory that raises while building the model."""
    raise ValueError("no such checkpoint: tiny.bin")


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
        assert "pass --unsafe-load" in err and err.count("\n") == 1
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
        """A refused specialization prints the explanation on one line (what, the fix as an option, where, the
        docs) and exits 1; --traceback raises it instead."""
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)"]) == 1
        err = capsys.readouterr().err.splitlines()
        assert err[0] == "tracing tests.models:SplitCat ..." and len(err) == 2
        assert err[1].startswith("specfx trace: SpecializationError: iterating over `x`")
        assert " Fix: pass --policy iter; " in err[1] and " at tests/models.py:" in err[1]
        assert err[1].endswith(" (specfx docs: docs/errors.md#specializationerror)")
        with pytest.raises(specfx.SpecializationError):
            main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)", "--traceback"])

    @pytest.mark.parametrize(
        "argv, line",
        [
            (["trace", "m:f", "--check", "abc"],
             "specfx trace: argument --check: invalid int value: 'abc' (`specfx trace --help` lists the options)"),
            (["trace"], "specfx trace: the following arguments are required: MODULE:FACTORY (`specfx trace --help` "
                        "lists the options)"),
            (["trace", "m:f", "--polcy", "iter"],
             "specfx trace: unrecognized arguments: --polcy iter; did you mean --policy? (`specfx trace --help` lists "
             "the options)"),
            (["demo", "--bogus"], "specfx demo: unrecognized arguments: --bogus (`specfx demo --help` lists the options)"),
            (["explain"], "specfx explain: the following arguments are required: file (`specfx explain --help` lists "
                          "the options)"),
            (["coverage", "g.pt"], "specfx coverage: the following arguments are required: --batches (`specfx "
                                   "coverage --help` lists the options)"),
            (["frobnicate"], "specfx: argument COMMAND: invalid choice: 'frobnicate' (choose from 'demo', 'trace', "
                             "'explain', 'coverage') (`specfx --help` lists the options)"),
        ],
    )
    def test_argparse_errors_are_one_line_naming_the_command(self, argv, line, capsys):
        """What argparse rejects is one line too (no usage block), named by the sub-command it belongs to."""
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
        assert code == 2
        assert capsys.readouterr().err == line + "\n"

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
            (["trace", "tests.models:SplitCat", "--kwarg", "oops"], "must look like NAME=VALUE"),
            (["trace", "tests.models:SplitCat", "--check", "-1"], "--check takes a count >= 0"),
            (["trace", "tests.models:SplitCat", "--input", "randn(1, 4, dtype=float99)"], "'float99' is not a torch dtype"),
            (["trace", "tests.models:SplitCat", "--scope", "heads"], "--scope 'heads' must look like GLOB=FLAGS"),
            (["trace", "tests.models:SplitCat", "--scope", "heads=itr"], "--scope 'itr': unknown specialization flag"),
            (["trace", "tests.models:SplitCat", "--concrete-arg", "1x=2"], "--concrete-arg '1x=2' must look like NAME=VALUE"),
            (["trace", "tests.models:SplitCat", "--check-input", "randn(2, x)"], "arguments must be literals"),
            (["trace", "tests.models:SplitCat", "--leaf", "nope"], "--leaf 'nope' is neither a submodule"),
            (["trace", "tests.test_cli:failing_factory"], "tests.test_cli:failing_factory() raised ValueError: no such "
                                                           "checkpoint: tiny.bin (at "),
        ],
    )
    def test_bad_arguments_are_one_line_errors(self, argv, message, capsys):
        """Bad arguments exit 2 with one line naming the problem."""
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1

    def test_no_inputs_says_the_trace_has_no_values(self, capsys):
        """Without --input/--kwarg the trace is torch.fx's (no values): said, with the fix."""
        assert main(["trace", "tests.test_cli:Dropped", "--eval"]) == 0
        assert ("specfx trace: no --input or --kwarg: tracing without example values, as torch.fx does (a decision "
                "on a value is refused); give the inputs to trace with values\n") in capsys.readouterr().err
        assert main(["trace", "tests.models:SplitCat"]) == 1
        assert "was traced without example inputs" in capsys.readouterr().err

    def test_interrupt_is_one_line(self, monkeypatch, capsys):
        """Ctrl-C while tracing: one line and the shell's code for an interrupt, no traceback."""
        def interrupted(args):
            raise KeyboardInterrupt

        monkeypatch.setattr("specfx.cli.trace_command.run", interrupted)
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)"]) == 130
        assert capsys.readouterr().err == "specfx trace: interrupted\n"

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


class TestCommandLineSpeaksCommandLine:
    def test_refusal_names_the_options(self, capsys):
        """A refusal under the CLI gives its fixes as options (--policy, --scope), not as Python, and no traceback."""
        assert main(["trace", "tests.test_cli:WithHeads", "--input", "randn(2, 4)", "--policy", "bool"]) == 1
        err = capsys.readouterr().err
        assert "Fix: pass --policy bool,iter; or decorate Heads.forward with @specialize(iter=True); or allow it " \
               "in this submodule only: --scope 'heads=iter'." in err
        assert "Policy(" not in err and "Traceback" not in err

    def test_scope_grants_one_submodule(self, capsys):
        """--scope GLOB=FLAGS grants the flags in the matching submodules only."""
        assert main(["trace", "tests.test_cli:WithHeads", "--input", "randn(2, 4)", "--scope", "heads=iter",
                     "--check-input", "randn(5, 4)"]) == 0
        assert "specfx: 1 specialization from 1 source line (iter: 1), all guarded" in capsys.readouterr().out
        assert main(["trace", "tests.test_cli:WithHeads", "--input", "randn(2, 4)", "--scope", "norm=iter"]) == 1
        assert "--scope 'heads=iter'" in capsys.readouterr().err

    def test_concrete_arg_bakes_a_python_input(self, capsys):
        """--concrete-arg NAME=VALUE bakes the value (the branch), as concrete_args does; the refusal names it."""
        assert main(["trace", "tests.test_cli:repeated", "--function", "--input", "randn(3)", "--kwarg",
                     "times=3"]) == 1
        assert ("Fix: pass --policy scalars; or decorate repeated with @specialize(scalars=True); or bake the input "
                "in with --concrete-arg times=3.") in capsys.readouterr().err
        assert main(["trace", "tests.test_cli:repeated", "--function", "--input", "randn(3)", "--concrete-arg",
                     "times=3", "--check", "2", "--check-input", "randn(5)"]) == 0
        captured = capsys.readouterr()
        assert "cat = torch.cat([x, x, x])" in captured.out and "3 check input(s) agree with eager" in captured.err

    @pytest.mark.parametrize("leaf", ["heads", "tests.test_cli:Heads", "tests.test_cli.Heads"])
    def test_leaf_by_name_or_class(self, leaf, capsys):
        """--leaf keeps a submodule (named, or by its class) out of the trace: it is called as a whole."""
        assert main(["trace", "tests.test_cli:WithHeads", "--input", "randn(2, 4)", "--leaf", leaf]) == 0
        out = capsys.readouterr().out
        assert "heads = self.heads(x)" in out and "split" not in out

    def test_torch_nn_class_as_leaf(self, capsys):
        """A torch.nn class is found by its bare name too."""
        assert main(["trace", "tests.test_cli:WithHeads", "--input", "randn(2, 4)", "--policy", "iter",
                     "--leaf", "LayerNorm"]) == 0
        assert "norm = self.norm(" in capsys.readouterr().out

    def test_check_input_other_batch_sizes(self, capsys):
        """--check-input runs other shapes through eager and graph; one the graph does not cover fails, one line
        of what and where plus the fix, exit 1."""
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)", "--policy", "iter",
                     "--check-input", "randn(8, 4, 5, 5)", "--check-input", "x=randn(2, 4, 1, 1)"]) == 0
        assert "2 check input(s) agree with eager" in capsys.readouterr().err
        assert main(["trace", "tests.models:SplitCat", "--input", "randn(1, 4, 3, 3)", "--policy", "iter",
                     "--check-input", "randn(1, 6, 3, 3)"]) == 1
        err = capsys.readouterr().err
        assert "TraceCheckError: --check-input 'randn(1, 6, 3, 3)': a guard failed" in err and "len(x) == 2" in err
        assert err.count("\n") == 2 and "check_inputs" not in err
        assert ("Fix: check with inputs the graph is meant to cover; for inputs like this one, trace with such an "
                "example (--input, --kwarg), or keep one graph per set of assumptions with "
                "specfx.Specializer(model, policy) in Python.") in err

    def test_random_check_input_is_named_by_its_option(self, capsys):
        """A --check input that fails is named as such (which of N, random), not as check_inputs[i]."""
        assert main(["trace", "tests.test_cli:Positive", "--input", "ones(8)", "--policy", "bool", "--check", "2",
                     "--check-input", "ones(3)"]) == 1
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith("specfx trace: TraceCheckError: --check input 1 of 2 (random, the example's shapes): "
                              "a guard failed")

    @pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA build can make the tensor")
    def test_input_torch_cannot_make_is_one_line(self, capsys):
        """A device this torch build lacks is one line naming the option, not torch's traceback."""
        try:  # (what torch says depends on the build: the CPU one, or a CUDA one without a driver)
            torch.randn(1, 4, device="cuda")
        except (AssertionError, RuntimeError) as error:
            says = str(error).strip().splitlines()[0]
        else:
            pytest.skip("this machine has a CUDA device")
        assert main(["trace", "tests.models:SplitCat", "--input", 'randn(1, 4, device="cuda")']) == 2
        err = capsys.readouterr().err
        assert err == f"specfx trace: --input 'randn(1, 4, device=\"cuda\")': torch.randn says: {says}\n"

    def test_model_failure_is_one_line_with_where(self, capsys):
        """The model's own error while tracing: one line, its type, message and the model's line; --traceback
        raises it instead."""
        assert main(["trace", "tests.test_cli:Broken", "--input", "randn(2, 4)"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 2 and err.startswith("tracing tests.test_cli:Broken ...\n")
        last = err.splitlines()[1]
        assert last.startswith("specfx trace: tracing failed: RuntimeError: shape '[3, -1, 7]' is invalid")
        assert "(at tests/test_cli.py:" in last and ": return x.view(3, -1, 7))" in last
        with pytest.raises(RuntimeError):
            main(["trace", "tests.test_cli:Broken", "--input", "randn(2, 4)", "--traceback"])

    def test_arguments_are_checked_before_the_model_is_imported(self, capsys):
        """A bad option is reported before the model's module is imported (and before "tracing ...")."""
        assert main(["trace", "tests.never_imported:build", "--policy", "itr"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("specfx trace: --policy 'itr': unknown specialization flag 'itr'") and "tracing" not in err
        assert "tests.never_imported" not in sys.modules

    @pytest.mark.parametrize("argv", [["--help"], ["trace", "--help"], ["trace", "m:f", "--policy", "itr"],
                                      ["trace", "m:f", "--input", "randn(x)"], ["trace", "nocolon"]])
    def test_help_and_argument_errors_import_no_torch(self, argv):
        """--help and argument errors answer without importing torch (what makes them take seconds)."""
        code = ("import sys; from specfx.cli import main\n"
                "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
                "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)")
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        assert done.stderr.strip().endswith("torch imported: False")

    def test_console_script_imports_from_the_current_directory(self, tmp_path, monkeypatch, capsys):
        """The console script (whose sys.path starts at its own folder) imports MODULE from the current directory,
        as python -m specfx does."""
        (tmp_path / "my_local_model.py").write_text(
            "import torch\nclass Tiny(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
        try:
            assert main(["trace", "my_local_model:Tiny", "--input", "randn(2)"]) == 0
        finally:
            sys.modules.pop("my_local_model", None)
        assert "mul = x * 2" in capsys.readouterr().out
        assert str(tmp_path) not in sys.path

    def test_console_script_loads_graphs_naming_local_modules(self, tmp_path, monkeypatch, capsys):
        """A saved graph whose leaf is a class of a module in the current directory: the console script's
        `coverage` and `explain --unsafe-load` import it from there, as python -m specfx does."""
        (tmp_path / "my_local_blocks.py").write_text(
            "import torch\nclass Inner(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
            "class Outer(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.inner = Inner()\n    def forward(self, x):\n        return self.inner(x) * 2\n")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
        torch.save([torch.ones(3, 4)], tmp_path / "batches.pt")
        try:
            assert main(["trace", "my_local_blocks:Outer", "--input", "randn(2, 4)", "--leaf", "inner",
                         "--save", "graph.pt"]) == 0
            sys.modules.pop("my_local_blocks", None)
            assert main(["coverage", "graph.pt", "--batches", "batches.pt"]) == 0
            sys.modules.pop("my_local_blocks", None)
            assert main(["explain", "--unsafe-load", "graph.pt"]) == 0
        finally:
            sys.modules.pop("my_local_blocks", None)
        assert "cannot load" not in capsys.readouterr().err
        assert str(tmp_path) not in sys.path

    def test_import_noise_is_dropped_for_the_command_only(self, caplog):
        """torchao's "Failed to load" lines (a CPU torch cannot load its CUDA kernels) are dropped while the command
        runs, and only then: specfx changes no logging of the user's own programs."""
        import logging

        from specfx.cli.trace_command import quiet_import_noise

        noisy = logging.getLogger("torchao")
        with caplog.at_level(logging.WARNING):
            with quiet_import_noise():
                noisy.warning("Failed to load /x/_C_mxfp8.so: Could not load this library")
                noisy.warning("a real warning")
            noisy.warning("Failed to load /x/_C_mxfp8.so: outside the command")
        assert [r.getMessage() for r in caplog.records] == [
            "a real warning", "Failed to load /x/_C_mxfp8.so: outside the command"]

    def test_training_mode_says_eval(self, capsys):
        """A factory's model in training mode: the warning is the command's own line and names --eval, which
        traces in eval mode (no warning, dropout gone from the outputs)."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("always")  # as outside the suite (whose configuration ignores this warning)
            assert main(["trace", "tests.test_cli:Dropped", "--input", "randn(2, 4)"]) == 0
        err = capsys.readouterr().err
        warning = [line for line in err.splitlines() if "training mode" in line]
        assert len(warning) == 1 and warning[0].startswith(
            "specfx trace: UserWarning: Dropped is traced in training mode, and 1 of its modules compute "
            "differently in training (drop (Dropout))")
        assert "for an inference graph, pass --eval (the model is put in eval mode before the trace)." in warning[0]
        assert main(["trace", "tests.test_cli:Dropped", "--input", "randn(2, 4)", "--eval", "--check", "2"]) == 0
        captured = capsys.readouterr()
        assert "training mode" not in captured.err and "2 check input(s) agree with eager" in captured.err
