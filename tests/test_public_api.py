"""The public surface: names, signatures and docstrings are pinned."""

from __future__ import annotations

import doctest
import inspect
import math
import re

import torch.fx

import specfx


class TestPublicAPI:
    def test_all(self):
        """__all__ is exactly the documented API, sorted."""
        assert specfx.__all__ == [
            "Coverage", "GuardCoverage", "GuardError", "GuardKind", "Policy", "SpecTracer", "SpecfxError", "Specialization", "SpecializationError",
            "SpecializationWarning", "Specialize", "Specializer", "TraceCheckError", "VariantLimitError",
            "coverage", "explain", "export", "specializations", "specialize", "trace",
        ]
        assert specfx.__all__ == sorted(specfx.__all__)

    def test_trace_signature(self):
        """trace() has the signature of API.md."""
        assert str(inspect.signature(specfx.trace)) == (
            "(root: 'Union[torch.nn.Module, Callable[..., Any]]', example_inputs: 'Any' = None, "
            "example_kwargs: 'Optional[Mapping[str, Any]]' = None, *, policy: 'PolicyLike' = None, "
            "concrete_args: 'Optional[Dict[str, Any]]' = None, guards: 'bool' = True, "
            "check_inputs: 'Optional[Sequence[Any]]' = None, check_tolerance: 'Optional[Tuple[float, float]]' = None, "
            "leaf_modules: 'Optional[Iterable[Any]]' = None, "
            "autowrap_functions: 'Tuple[Callable[..., Any], ...]' = (), "
            f"autowrap_modules: 'Tuple[types.ModuleType, ...]' = ({math!r},), "
            "trace_through: 'Optional[Iterable[Any]]' = None, "
            "tracer_class: 'Type[SpecTracer]' = <class 'specfx.SpecTracer'>, "
            "calibration: 'Optional[Iterable[Any]]' = None, progress: 'Optional[bool]' = None) "
            "-> 'torch.fx.GraphModule'"
        )

    def test_export_signature(self):
        """export() has the signature of API.md."""
        assert str(inspect.signature(specfx.export)) == (
            "(root: 'Union[torch.nn.Module, Callable[..., Any]]', example_inputs: 'Any' = None, "
            "example_kwargs: 'Optional[Mapping[str, Any]]' = None, *, policy: 'PolicyLike' = None, "
            "dynamic_shapes: 'DynamicShapes' = 'auto', **trace_options: 'Any') "
            "-> 'torch.export.ExportedProgram'"
        )

    def test_policy_signature(self):
        """Policy() has the keywords of API.md."""
        params = inspect.signature(specfx.Policy).parameters
        assert list(params) == ["flags", "iter", "bool", "shapes", "scalars", "param_shapes_constant",
                                "scopes", "annotations"]
        assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(params)[1:])

    def test_tracer_constructs_without_arguments(self):
        """SpecTracer() keeps torch.fx.Tracer's constructor (unpickling calls it with no args)."""
        fx_params = list(inspect.signature(torch.fx.Tracer.__init__).parameters)
        ours = list(inspect.signature(specfx.SpecTracer.__init__).parameters)
        assert ours[: len(fx_params)] == fx_params
        assert isinstance(specfx.SpecTracer(), specfx.SpecTracer)

    def test_every_public_name_has_a_docstring_with_an_example(self):
        """Each public name is documented with a runnable example."""
        finder = doctest.DocTestFinder(recurse=False)
        for name in specfx.__all__:
            obj = getattr(specfx, name)
            assert inspect.getdoc(obj), name
            assert any(test.examples for test in finder.find(obj, name)), f"{name} has no example"

    def test_py_typed(self):
        """The package ships py.typed."""
        import pathlib

        assert (pathlib.Path(specfx.__file__).parent / "py.typed").exists()


class TestStaticTypes:
    def test_decorated_code_keeps_its_types(self, tmp_path):
        """For mypy, @specialize(...) keeps a function's signature and a module class's type, and
        specializations(gm) is a tuple of Specialization records. (torch itself is not analysed:
        its types read as Any, which keeps this check to seconds.)"""
        from mypy import api

        config = tmp_path / "mypy.ini"
        config.write_text("[mypy]\nstrict = True\nfollow_imports = silent\ndisallow_subclassing_any = False\n"
                          "[mypy-torch.*,numpy.*,sympy.*]\nfollow_imports = skip\n")
        snippet = tmp_path / "user_code.py"
        snippet.write_text(
            "import torch\n"
            "from torch import nn\n"
            "import specfx\n"
            "@specfx.specialize(iter=True)\n"
            "def f(x: torch.Tensor, n: int = 2) -> torch.Tensor:\n"
            "    return x * n\n"
            "@specfx.specialize(bool=True)\n"
            "class Block(nn.Module):\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        return x\n"
            "reveal_type(f)\n"
            "reveal_type(Block())\n"
            "reveal_type(specfx.specializations(specfx.trace(f)))\n"
            "f(torch.ones(1), 'two')\n"
        )
        out, _, status = api.run([str(snippet), "--config-file", str(config), "--no-incremental",
                                  "--cache-dir", str(tmp_path / "cache")])
        assert status == 1, out
        notes = [line.split(": ", 2)[2] for line in out.splitlines() if ": note: " in line or ": error: " in line]
        assert notes[:2] == ['Revealed type is "def (x: Any, n: int =) -> Any"', 'Revealed type is "user_code.Block"']
        assert re.fullmatch(r'Revealed type is "tuple\[specfx\.[\w.]+\.Specialization, \.\.\.\]"', notes[2])
        assert notes[3:] == ['Argument 2 to "f" has incompatible type "str"; expected "int"  [arg-type]']


# built so that this file does not contain them itself
MACHINE_PATHS = [b"/" + name + b"/" for name in (b"work", b"root", b"tmp", b"home")]


class TestTree:
    def test_no_machine_specific_paths(self):
        """No file of the checkout (text or pickle) names a path of the machine it was made on."""
        import os
        import pathlib

        root = pathlib.Path(__file__).resolve().parent.parent
        skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache"}
        offenders = []
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [d for d in subfolders if d not in skip and not d.endswith(".egg-info")
                             and not d.startswith(".venv-")]  # (.ci/run's client environments)
            for name in files:
                if name in skip:  # a worktree's .git is a file naming the main checkout
                    continue
                data = (pathlib.Path(folder) / name).read_bytes()
                offenders += [f"{os.path.relpath(folder, root)}/{name}: {marker.decode()}"
                              for marker in MACHINE_PATHS if marker in data]
        assert offenders == []

    def test_architecture_lists_every_module(self):
        """docs/architecture.md has a row for every module of specfx/ (a newcomer's map)."""
        import pathlib

        root = pathlib.Path(__file__).resolve().parent.parent
        text = (root / "docs" / "architecture.md").read_text()
        package = root / "specfx"
        # specfx's modules by their path in the package (`_capture/tracer.py`); tools/: the next test
        named = [p.relative_to(package).as_posix() for p in sorted(package.rglob("*.py")) if p.name != "__init__.py"]
        missing = [name for name in named if f"`{name}`" not in text]
        assert missing == [], "add a row to docs/architecture.md for each"

    def test_tools_map_is_complete(self):
        """Every script under tools/ has a row in docs/architecture.md by its path in tools/
        (``bench/suite.py``), every group folder is in tools/README.md with a README of its
        own, and every script that runs as a program is named in its folder's README by the
        command that runs it (``python -m tools.bench.suite``)."""
        import pathlib

        tools = pathlib.Path(__file__).resolve().parent.parent / "tools"
        architecture = (tools.parent / "docs" / "architecture.md").read_text()
        index = (tools / "README.md").read_text()
        scripts = sorted(p for p in tools.rglob("*.py") if p.name != "__init__.py")
        groups = sorted({p.parent for p in scripts} - {tools})
        assert {g.name for g in groups} >= {"bench", "fuzz", "zoo", "peers"}
        assert [g.name for g in groups if not (g / "__init__.py").exists()] == [], "a group is a package"
        assert [g.name for g in groups if f"`{g.name}/`" not in index] == [], "list the group in tools/README.md"
        no_row = [str(p.relative_to(tools)) for p in scripts if f"`{p.relative_to(tools).as_posix()}`" not in architecture]
        assert no_row == [], "add a row to docs/architecture.md's 'Beside the library' for each"
        unnamed = []
        for script in scripts:
            if 'if __name__ == "__main__":' not in script.read_text():
                continue
            readme = script.parent / "README.md"
            command = "python -m " + ".".join(("tools", *script.relative_to(tools).with_suffix("").parts))
            if not readme.exists() or f"`{command}" not in readme.read_text():
                unnamed.append(f"{script.relative_to(tools)}: {command}")
        assert unnamed == [], "name each entry point in its folder's README.md"
