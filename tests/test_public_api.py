"""The public surface: names, signatures and docstrings are pinned."""

from __future__ import annotations

import doctest
import inspect
import math

import specfx


class TestPublicAPI:
    def test_all(self):
        """__all__ is exactly the documented API, sorted."""
        assert specfx.__all__ == [
            "GuardError", "GuardKind", "Policy", "SpecTracer", "SpecfxError", "Specialization", "SpecializationError",
            "SpecializationWarning", "Specialize", "Specializer", "TraceCheckError", "VariantLimitError",
            "explain", "specializations", "specialize", "trace",
        ]
        assert specfx.__all__ == sorted(specfx.__all__)

    def test_trace_signature(self):
        """trace() has the signature of API.md."""
        assert str(inspect.signature(specfx.trace)) == (
            "(root: 'Union[torch.nn.Module, Callable[..., Any]]', example_inputs: 'Any' = None, "
            "example_kwargs: 'Optional[Mapping[str, Any]]' = None, *, policy: 'PolicyLike' = None, "
            "concrete_args: 'Optional[Dict[str, Any]]' = None, guards: 'bool' = True, "
            "check_inputs: 'Optional[Sequence[Any]]' = None, leaf_modules: 'Optional[Iterable[Any]]' = None, "
            "autowrap_functions: 'Tuple[Callable[..., Any], ...]' = (), "
            f"autowrap_modules: 'Tuple[types.ModuleType, ...]' = ({math!r},)) "
            "-> 'torch.fx.GraphModule'"
        )

    def test_policy_signature(self):
        """Policy() has the keywords of API.md."""
        params = inspect.signature(specfx.Policy).parameters
        assert list(params) == ["flags", "iter", "bool", "shapes", "scalars", "param_shapes_constant",
                                "scopes", "annotations"]
        assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(params)[1:])

    def test_tracer_constructs_without_arguments(self):
        """SpecTracer() keeps torch.fx.Tracer's constructor (unpickling calls it with no args)."""
        fx_params = list(inspect.signature(specfx.SpecTracer.__bases__[0].__init__).parameters)
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
