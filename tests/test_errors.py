"""The exact texts users read: pinned, because error messages are a feature."""

from __future__ import annotations

import inspect
import os
import multiprocessing.reduction
import pathlib
import pickle
import re

import pytest
import torch

import specfx
from specfx import GuardError, Policy, SpecializationError, specialize
from specfx import errors

from .models import MODELS_FILE, SplitCat, line_of

THIS_FILE = os.path.relpath(__file__)
SEED_LINE = line_of(SplitCat.forward, "self.call_cat(*x)")


def _message(exc_info):
    return str(exc_info.value)


class TestSpecializationError:
    def test_denied_message(self):
        """Refusal: what, traced value, which flag, the fixes, the user's line."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3))
        assert _message(caught) == (
            "iterating over `x` (a loop, *x, tuple() or list()) (depends on argument `x`) needs a concrete "
            "value (traced value: 2), but Specialize.ITER_LEN is not allowed by the policy in force.\n"
            "Fix: pass policy=Policy(iter=True) to specfx.trace; or decorate SplitCat.forward with "
            "@specialize(iter=True).\n"
            f"  at {MODELS_FILE}:{SEED_LINE}: return self.call_cat(*x)\n"
            "(specfx docs: docs/errors.md#specializationerror)"
        )
        assert caught.value.location == f"{MODELS_FILE}:{SEED_LINE}"
        assert caught.value.operation.startswith("iterating over `x`")

    def test_forbidden_by_annotation_message(self):
        """A denial by an annotation names that annotation."""

        @specialize(bool=False)
        def strict(x):
            if x.sum() > 0:
                return x
            return -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(strict, torch.ones(2), policy=Policy(bool=True))
        origin = "@specialize(bool=False) on TestSpecializationError.test_forbidden_by_annotation_message.<locals>.strict"
        assert _message(caught).splitlines()[:2] == [
            f"bool() of `x.sum() > 0` (depends on argument `x`) needs a concrete value (traced value: True), "
            f"but Specialize.BOOL is forbidden here by {origin}.",
            f"Fix: remove bool=False from {origin}, or keep `bool() of `x.sum() > 0`` out of that code.",
        ]

    def test_no_examples_message_keeps_fx_text(self):
        """Without examples the message contains torch.fx's own text and suggests examples."""

        def f(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f)
        first, fix, where, pointer = _message(caught).splitlines()
        assert first == (
            "bool() of `x.sum() > 0` needs a concrete value, but `x.sum() > 0` was traced without example inputs, so it has "
            "none (symbolically traced variables cannot be used as inputs to control flow)."
        )
        assert fix.startswith("Fix: pass representative example inputs, e.g. specfx.trace(model, (example_input,), "
                              "policy=Policy(bool=True))")
        assert where.strip().endswith("return x if x.sum() > 0 else -x")
        assert isinstance(caught.value, torch.fx.proxy.TraceError)

    def test_meta_message(self):
        """A data decision on meta tensors says meta tensors have no data."""

        def f(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f, torch.empty(2, device="meta"), policy=Policy(bool=True))
        assert _message(caught).splitlines()[0] == (
            "bool() of `x.sum() > 0` depends on tensor data, but `x.sum() > 0` is on the meta device: meta tensors carry "
            "shapes and dtypes but no data, so there is no value to decide on."
        )

    def test_config_input_suggests_concrete_args(self):
        """A Python int input used in `if` also suggests concrete_args."""

        def f(x, n):
            return x + 1 if n else x

        with pytest.raises(SpecializationError, match=r"concrete_args=\{'n': 2\}"):
            specfx.trace(f, (torch.ones(1), 2))

    def test_bool_input_is_its_value_guarded_at_entry(self):
        """A Python bool input is the code's own value (so `flag is True` answers as in eager),
        recorded and checked at graph entry."""

        def f(x, flag):
            return x + 1 if flag is True else x

        gm = specfx.trace(f, (torch.ones(1), True))
        assert [s.guard_description for s in gm.specializations] == ["flag == True"]
        assert torch.equal(gm(torch.ones(1), True), torch.full((1,), 2.0))
        with pytest.raises(GuardError, match="flag == False"):
            gm(torch.ones(1), False)


class TestGuardError:
    def test_message(self):
        """Guard failure: the assumption, traced vs actual, the source line, how to retrace."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy=Policy(iter=True))
        with pytest.raises(GuardError) as caught:
            gm(torch.randn(1, 6, 3, 3))
        assert _message(caught) == (
            "specfx guard failed: the graph was traced assuming len(x) == 2, but for this input "
            "len(x) == 3.\n"
            f"  assumed at {MODELS_FILE}:{SEED_LINE}: return self.call_cat(*x)\n"
            "The graph is only valid for inputs that keep this assumption. Retrace with an example input "
            "like this one (specfx.trace(model, example_inputs, policy=...)), let "
            "specfx.Specializer(model, policy) keep one graph per set of assumptions, or narrow the policy "
            "so that this value stays symbolic.\n"
            "(specfx docs: docs/errors.md#guarderror)"
        )
        error = caught.value
        assert (error.expression, error.expected, error.actual) == ("len(x)", 2, 3)
        assert error.kind is specfx.guards.GuardKind.LEN
        assert error.location == f"{MODELS_FILE}:{SEED_LINE}: return self.call_cat(*x)"

    def test_wrong_input_type_is_a_guard_error(self):
        """An input of the wrong type fails the guard as GuardError, not TypeError."""

        def f(x, mask=None):
            return x if mask is None else x * mask

        gm = specfx.trace(f, torch.ones(2))
        with pytest.raises(GuardError, match="mask is None, but for this input mask is not None"):
            gm(torch.ones(2), torch.ones(2))

    def test_hierarchy(self):
        """Both errors subclass SpecfxError and the nearest builtin."""
        assert issubclass(GuardError, RuntimeError) and issubclass(GuardError, specfx.SpecfxError)
        assert issubclass(SpecializationError, ValueError)
        assert issubclass(SpecializationError, torch.fx.proxy.TraceError)
        assert issubclass(specfx.TraceCheckError, AssertionError)


class TestArgumentErrors:
    def test_example_inputs_not_matching_signature(self):
        """Too many example inputs: TypeError showing the signature."""
        with pytest.raises(TypeError) as caught:
            specfx.trace(SplitCat(), (torch.ones(1), torch.ones(1)))
        assert str(caught.value) == (
            "the example inputs do not fit SplitCat.forward(x): too many positional arguments. "
            "Pass example_inputs as a tuple of positional arguments and example_kwargs as a dict"
        )

    def test_unknown_example_kwarg(self):
        """An example kwarg the signature lacks is a TypeError naming it."""
        with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
            specfx.trace(SplitCat(), (torch.ones(1, 4, 1, 1),), {"y": 1})

    def test_concrete_args_conflict(self):
        """A parameter given both as example and concrete arg is refused."""
        with pytest.raises(TypeError, match="x given both as example input and in concrete_args"):
            specfx.trace(SplitCat(), torch.ones(1, 4, 1, 1), concrete_args={"x": torch.fx.PH})

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"policy": 3}, "policy= takes a specfx.Policy"),
            ({"policy": "iter,nope"}, "unknown specialization flag 'nope'"),
            ({"guards": "yes"}, "guards= takes True or False"),
            ({"leaf_modules": [3]}, "leaf_modules= takes nn.Module subclasses"),
            ({"example_kwargs": [1]}, "example_kwargs= takes a dict"),
        ],
    )
    def test_bad_trace_arguments(self, kwargs, match):
        """Each bad trace() argument gets a TypeError/ValueError saying what is expected."""
        with pytest.raises((TypeError, ValueError), match=match):
            specfx.trace(SplitCat(), torch.ones(1, 4, 1, 1), **kwargs)

    def test_not_callable_root(self):
        """trace() of something that is neither module nor function is a TypeError."""
        with pytest.raises(TypeError, match="takes an nn.Module or a function"):
            specfx.trace(42)


ERROR_CLASSES = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
                 if issubclass(cls, (errors.SpecfxError, errors.SpecializationWarning))]
DOCS_ERRORS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "errors.md"


def _anchors(markdown: str) -> set:
    """The anchors GitHub gives the headings of a markdown text."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def _raised(action) -> BaseException:
    try:
        action()
    except Exception as error:
        return error
    raise AssertionError("nothing was raised")


def _chunk_pair(x):
    a, b = torch.chunk(x, 2)
    return a + b


# Each error as users meet it: raised by specfx itself.
RAISED = {
    "SpecializationError": lambda: specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3)),
    "SpecializationTypeError": lambda: specfx.trace(lambda x: x.new_zeros(int(x.sum())), torch.ones(2)),
    "SpecializationRuntimeError": lambda: specfx.trace(lambda x: x * len(x)),
    "GuardError": lambda: specfx.trace(_chunk_pair, torch.ones(4))(torch.ones(1)),
    "TraceCheckError": lambda: specfx.trace(_chunk_pair, torch.ones(4), check_inputs=[torch.ones(1)]),
    "VariantLimitError": lambda: [spec(torch.ones(n)) for spec in [specfx.Specializer(_chunk_pair, max_variants=1)]
                                  for n in (4, 1)],
}


def _same_error(again: BaseException, error: BaseException) -> None:
    assert type(again) is type(error)
    assert str(again) == str(error) and again.args == error.args
    assert set(vars(again)) == set(vars(error))
    for name, value in vars(error).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(getattr(again, name), value), name
        else:
            assert getattr(again, name) == value, name


class TestErrorsAsData:
    def test_every_error_class_is_raised_somewhere_here(self):
        """The table of raised errors covers every concrete error class."""
        concrete = {cls.__name__ for cls in ERROR_CLASSES if issubclass(cls, errors.SpecfxError)} - {"SpecfxError"}
        assert concrete == set(RAISED)

    @pytest.mark.parametrize("name", sorted(RAISED))
    def test_raised_errors_are_module_level_classes(self, name):
        """What specfx raises is a class defined in specfx.errors, not one made at run time."""
        error = _raised(RAISED[name])
        assert type(error) is getattr(errors, name)
        assert type(error).__module__ == "specfx.errors" and type(error).__qualname__ == name

    @pytest.mark.parametrize("name", sorted(RAISED))
    @pytest.mark.parametrize("dumps", [pickle.dumps, multiprocessing.reduction.ForkingPickler.dumps],
                             ids=["pickle", "multiprocessing"])
    def test_raised_errors_round_trip(self, name, dumps):
        """Each raised error unpickles to the same type, message and attributes."""
        error = _raised(RAISED[name])
        _same_error(pickle.loads(dumps(error)), error)

    def test_constructed_errors_round_trip_with_every_attribute(self):
        """Errors built by hand with all keyword attributes survive pickling too."""
        built = [
            errors.SpecializationTypeError("m", operation="int() of `n`", flag=specfx.Specialize.SCALARS,
                                           value=torch.tensor(3), location="m.py:1"),
            errors.GuardError("m", expression="len(x)", kind="len", expected=2, actual=3,
                              location="m.py:1: a, b = x"),
            errors.TraceCheckError("m", index=4),
            errors.VariantLimitError("m"),
        ]
        for error in built:
            _same_error(pickle.loads(pickle.dumps(error)), error)

    def test_guard_error_where_is_location(self):
        """GuardError(where=...) (the 0.1 keyword) fills `location`; `.where` reads it."""
        error = GuardError("m", expected=2, actual=3, where="m.py:1: y = x")
        assert error.location == error.where == "m.py:1: y = x"
        assert GuardError("m").where == ""

    def test_compatible_classes_are_both(self):
        """The len()/int() errors are SpecializationErrors and the builtin torch.fx raises."""
        assert issubclass(errors.SpecializationRuntimeError, SpecializationError)
        assert issubclass(errors.SpecializationRuntimeError, RuntimeError)
        assert issubclass(errors.SpecializationTypeError, TypeError)
        assert errors.compatible_error_class(TypeError) is errors.SpecializationTypeError


class TestDocsPointers:
    @pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
    def test_section_exists(self, cls):
        """Each error class points at a heading that exists in docs/errors.md."""
        assert cls.docs_section in _anchors(DOCS_ERRORS.read_text())

    @pytest.mark.parametrize("name", sorted(RAISED))
    def test_message_ends_with_pointer(self, name):
        """Every raised message's last line is the pointer to its own section."""
        error = _raised(RAISED[name])
        assert str(error).splitlines()[-1] == errors.docs_pointer(type(error).docs_section)

    def test_pointer_not_doubled(self):
        """A message that already ends with its pointer does not get a second one."""
        once = str(GuardError("m"))
        assert str(GuardError(once)) == once

    def test_warning_ends_with_pointer(self):
        """The degenerate-example warning points at its section too."""
        with pytest.warns(specfx.SpecializationWarning) as caught:
            specfx.trace(lambda x: sum(torch.split(x, 4)), torch.ones(4), policy=Policy(iter=True))
        assert str(caught[0].message).splitlines()[-1] == errors.docs_pointer("specializationwarning")

    def test_docstrings_show_failing_and_fixed(self):
        """Each error class docstring is its documentation: at least two runnable examples."""
        import doctest

        finder = doctest.DocTestFinder(recurse=False)
        for cls in ERROR_CLASSES:
            if cls is errors.SpecfxError:
                continue
            (test,) = finder.find(cls, cls.__name__)
            assert len(test.examples) >= 2, cls.__name__


class TestGuardErrorKind:
    @pytest.mark.parametrize("model, example, other, kind", [
        (lambda x: x * 2 if x.sum() > 0 else x, torch.ones(2), -torch.ones(2), "bool"),
        (lambda x: x.new_zeros(int(x.sum())), torch.ones(2), torch.ones(3), "int"),
        (lambda x: x.reshape(x.shape[0] * x.shape[1]), torch.ones(2, 3), torch.ones(2, 4), "size"),
    ])
    def test_kind_names_the_failed_check(self, model, example, other, kind):
        """A guard failure carries the kind of the check that failed."""
        gm = specfx.trace(model, example, policy="all")
        with pytest.raises(GuardError) as caught:
            gm(other)
        assert caught.value.kind == kind


class Tiny(torch.nn.Module):
    """The smallest model of the first hour."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


class Converts(torch.nn.Module):
    """A model that takes arrays as eager can: it converts them itself."""

    def forward(self, x):
        return torch.from_numpy(x) * 2


class TestFirstHourMistakes:
    def test_model_class_instead_of_instance(self):
        """The class itself, with or without examples, in trace() or a Specializer: pass an instance."""
        expected = ("trace() takes a model instance, but got the class Tiny itself. Pass an instance, "
                    "e.g. Tiny()")
        for call in (lambda: specfx.trace(Tiny, torch.randn(2, 4)), lambda: specfx.trace(Tiny)):
            with pytest.raises(TypeError) as caught:
                call()
            assert str(caught.value) == expected
        with pytest.raises(TypeError, match=r"^Specializer\(\) takes a model instance, .* e.g. Tiny\(\)$"):
            specfx.Specializer(Tiny)
        with pytest.raises(TypeError, match=r"e\.g\. Linear\(\.\.\.\)$"):  # its constructor needs arguments
            specfx.trace(torch.nn.Linear, torch.randn(2, 4))

    def test_keyword_batch_passed_positionally(self):
        """A dict whose keys are forward's parameters, given positionally: pass example_kwargs=batch."""
        batch = {"x": torch.randn(2, 4)}
        for example in (batch, (batch,)):
            with pytest.raises(TypeError) as caught:
                specfx.trace(Tiny(), example)
            assert str(caught.value) == (
                "the example is a dict whose keys (x) are parameters of Tiny.forward, passed positionally: forward "
                "would receive the whole dict as `x`. A dict of keyword arguments (a tokenizer batch) goes in "
                "example_kwargs: pass example_kwargs=batch, e.g. specfx.trace(model, example_kwargs=batch)")
        gm = specfx.trace(Tiny(), example_kwargs=batch)
        x = torch.randn(3, 4)
        assert torch.equal(gm(x), gm.linear(x).relu())

    def test_dict_that_is_one_argument_is_traced(self):
        """A dict whose keys are not parameters is one argument, as forward(batch) takes it."""
        gm = specfx.trace(lambda batch: batch["pixels"] * 2, ({"pixels": torch.ones(2)},))
        assert torch.equal(gm({"pixels": torch.ones(3)}), torch.full((3,), 2.0))

    def test_tokenizer_batch_passed_positionally(self):
        """transformers' own case: a BatchEncoding passed as the positional example."""
        transformers = pytest.importorskip("transformers")
        model = transformers.BertModel(transformers.BertConfig(
            vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)).eval()
        batch = transformers.BatchEncoding({"input_ids": torch.randint(0, 100, (2, 8)),
                                            "attention_mask": torch.ones(2, 8, dtype=torch.int64)})
        with pytest.raises(TypeError, match=r"^the example is a BatchEncoding whose keys \(input_ids, "
                                            r"attention_mask\) are parameters of BertModel.forward, .*"
                                            r"as `input_ids`\. .* pass example_kwargs=batch"):
            specfx.trace(model, batch)

    def test_list_taken_as_one_argument(self):
        """A list is one argument; when the model fails on it, the message says so and how to pass a tuple."""
        with pytest.raises(TypeError) as caught:
            specfx.trace(Tiny(), [torch.randn(2, 4)])
        lines = str(caught.value).splitlines()
        assert lines[0] == ("the model failed on the example: TypeError: linear(): argument 'input' (position 1) "
                            "must be Tensor, not list")  # (not torch.fx's immutable_list, which the user never made)
        assert lines[1] == f"  at {THIS_FILE}:{line_of(Tiny.forward, 'return self.linear(x).relu()')}: " \
                           f"return self.linear(x).relu()"
        assert lines[2] == ("The example is a list (1 item(s) of type Tensor), and a list is passed as one argument, "
                            "`x`, as model(example) would. Pass positional arguments as a tuple: "
                            "specfx.trace(model, tuple(example)) (or, if forward takes a list, check what the list "
                            "holds)")
        assert isinstance(caught.value.__cause__, TypeError)

    def test_type_reads_name_the_users_value(self):
        """`torch.is_tensor(y)` and `isinstance(w, nn.Parameter)` name `y` and `w` (not torch's own parameter
        names, `obj` and `instance`), in the records and in the guard's failure."""

        def adds(x, y):
            return x + y if torch.is_tensor(y) else x

        def scales(x, w):
            return x * w if isinstance(w, torch.nn.Parameter) else x

        gm = specfx.trace(adds, (torch.ones(2), torch.ones(2)))
        assert [s.expression for s in gm.specializations] == ["y"]
        gm = specfx.trace(scales, (torch.ones(2), torch.nn.Parameter(torch.ones(2))))
        assert [s.expression for s in gm.specializations] == ["w", "hasattr(w, '_is_param')"]
        with pytest.raises(GuardError) as caught:
            gm(torch.ones(2), torch.ones(2))
        assert str(caught.value).startswith("specfx guard failed: the graph was traced assuming type(w) is "
                                            "torch.nn.parameter.Parameter, but for this input type(w) is torch.Tensor.")

    def test_torch_functions_are_named_as_called(self):
        """A refusal names torch.cat as the code calls it, not by its __qualname__
        (torch._VariableFunctionsClass.cat)."""

        def concatenates(x):
            try:
                return torch.cat([x, torch.ones(3, 3)])
            except RuntimeError:
                return x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(concatenates, torch.ones(2))
        assert str(caught.value).startswith("`torch.cat()` raised RuntimeError ('Tensors must have same number of "
                                            "dimensions: got 1 and 2') on the example inputs and the model code "
                                            "caught it")

    def test_a_name_that_matches_nothing_is_not_ignored_silently(self):
        """A leaf_modules= name of no submodule warns (with the likely one), a concrete_args= name of no
        parameter is refused, and specializations() of a plain model names itself."""
        model = Tiny()
        with pytest.warns(UserWarning) as caught:
            specfx.trace(model, torch.randn(2, 4), leaf_modules=["linea"])
        assert [str(w.message) for w in caught] == [
            "leaf_modules= names 'linea', which is no submodule of Tiny, so it changes nothing; did you mean 'linear'?"]
        assert caught[0].filename == __file__
        with pytest.raises(TypeError) as refused:
            specfx.trace(model, torch.randn(2, 4), concrete_args={"scale": 2})
        assert str(refused.value) == ("concrete_args names 'scale', which is no parameter of Tiny.forward(x); it "
                                      "takes the names of forward's parameters")
        with pytest.raises(TypeError, match=r"^specializations\(\) takes a GraphModule made by specfx.trace"):
            specfx.specializations(model)

    def test_list_of_two_positional_arguments(self):
        """A list for a forward of two parameters does not fit: the message says a list is one argument."""
        with pytest.raises(TypeError, match=r"missing a required argument: 'y'\. Pass example_inputs as a tuple .* "
                                            r"\(the example is a list, which is one argument, as model\(example\) "
                                            r"takes it: positional arguments go in a tuple\)$"):
            specfx.trace(lambda x, y: x + y, [torch.ones(2), torch.ones(2)])

    def test_list_a_model_takes_is_traced(self):
        """A model whose forward takes a list traces with a list example."""
        gm = specfx.trace(lambda xs: xs[0] + xs[1], [torch.ones(2), torch.ones(2)])
        assert torch.equal(gm([torch.ones(2), torch.full((2,), 2.0)]), torch.full((2,), 3.0))

    @pytest.mark.parametrize("model", [Tiny(), Converts()], ids=["tensor-model", "converting-model"])
    def test_numpy_example_is_refused_with_the_fix(self, model):
        """A numpy example is refused before the trace (never a crash inside torch), naming the input and the fix."""
        numpy = pytest.importorskip("numpy")
        with pytest.raises(specfx.SpecializationError) as caught:
            specfx.trace(model, numpy.ones((2, 4), dtype=numpy.float32))
        line = inspect.getsourcelines(type(model).forward)[1]
        assert str(caught.value).startswith(
            "example input x is a numpy.ndarray (shape (2, 4), dtype float32); specfx traces tensors, and the graph "
            "takes tensors (held as a constant, the array would be this example's for every call).\n"
            "Fix: pass torch.from_numpy(x) as the example, and convert arrays the same way before "
            "calling the graph (if forward converts arrays itself, with torch.as_tensor or torch.from_numpy, move "
            f"that conversion out of forward)\n  at tests/test_errors.py:{line}: def forward(self, x):")
        assert caught.value.location.startswith(f"tests/test_errors.py:{line}")

    def test_numpy_inside_a_structure_is_named_by_its_path(self):
        """An array inside a dict input is named by its key path."""
        numpy = pytest.importorskip("numpy")
        with pytest.raises(specfx.SpecializationError, match=r"^example input batch\['pixels'\] is a numpy.ndarray"):
            specfx.trace(lambda batch: batch["pixels"] * 2, example_kwargs={"batch": {"pixels": numpy.ones(3)}})

    def test_training_mode_warns_once(self):
        """A model with dropout traced in training mode warns once per trace: how to trace in eval mode, and what
        the graph keeps of the mode."""
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Dropout(0.1))
        with pytest.warns(UserWarning) as caught:
            specfx.trace(model, torch.randn(2, 4))
        training = [w for w in caught if "training mode" in str(w.message)]
        assert len(training) == 1 and training[0].filename == __file__
        assert str(training[0].message) == (
            "Sequential is traced in training mode, and 2 of its modules compute differently in training "
            "(1 (Dropout), 2 (Dropout)), so the graph computes as training does (dropout drawn, batch statistics "
            "used). Models start in training mode, models built from a config too: for an inference graph, call "
            "model.eval() before specfx.trace. The mode is guarded: where forward reads self.training, the graph "
            "raises GuardError when called after gm.eval() (its leaf modules, such as nn.Dropout, follow "
            "gm.eval()); specfx.Specializer keeps one graph per mode.")

    def test_what_the_training_mode_warning_says_holds(self):
        """The warning's promise: a graph traced in training mode whose forward reads self.training (F.dropout's
        flag) raises GuardError after gm.eval(), naming the mode; one whose only reader is a leaf nn.Dropout
        follows gm.eval() as eager does."""
        reads = ReadsTheMode()
        with pytest.warns(UserWarning, match="The mode is guarded"):
            gm = specfx.trace(torch.nn.Sequential(reads, torch.nn.Dropout(0.5)), torch.randn(2, 4))
        gm.eval()
        with pytest.raises(GuardError, match=r"traced in training mode .* now in eval mode"):
            gm(torch.randn(2, 4))
        leaf_only = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        with pytest.warns(UserWarning, match="The mode is guarded"):
            gm = specfx.trace(leaf_only, torch.randn(2, 4))
        gm.eval(), leaf_only.eval()
        x = torch.randn(8, 4)
        torch.testing.assert_close(gm(x), leaf_only(x))

    def test_eval_mode_or_no_mode_dependent_module_is_quiet(self):
        """No warning in eval mode, nor in training mode when no module computes differently."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            specfx.trace(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval(), torch.randn(2, 4))
            specfx.trace(Tiny(), torch.randn(2, 4))

    def test_check_error_ends_with_its_own_pointer_and_fix(self):
        """A guard failing on a check input: the guard's facts, the check's fix, one docs pointer (its own)."""

        def heads(x):
            return torch.cat([part * 2 for part in torch.split(x, 2)])

        with pytest.raises(specfx.TraceCheckError) as caught:
            specfx.trace(heads, torch.ones(4), policy="iter", check_inputs=[torch.ones(6)])
        lines = str(caught.value).splitlines()
        assert lines[0] == "check_inputs[0]: a guard failed, so the graph does not cover this input:"
        assert lines[1].startswith("specfx guard failed: the graph was traced assuming len(torch.split(x, 2, dim=0)) "
                                   "== 2, but for this input len(torch.split(x, 2, dim=0)) == 3.")
        assert lines[2].startswith("  assumed at ") and lines[2].endswith(
            "return torch.cat([part * 2 for part in torch.split(x, 2)])")
        assert lines[3:] == [
            "Fix: check with inputs the graph is meant to cover; for inputs like this one, trace with such an "
            "example, or let specfx.Specializer(model, policy) keep one graph per set of assumptions.",
            "(specfx docs: docs/errors.md#tracecheckerror)"]


class _Block(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5, self.training)


class ReadsTheMode(torch.nn.Module):
    """Reads the mode in a submodule's F.dropout and in its own branch."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.block = _Block()

    def forward(self, x):
        x = self.block(self.linear(x))
        return x + 1 if self.training else x


def _rows(x):
    return torch.stack([row * 2 for row in x])


def _length(x):
    return x * len(x)


class TestDegenerateSizes:
    @pytest.mark.parametrize("function, policy, expected", [
        (_rows, "iter", "len(x) == 1"),
        (_length, "iter", "len(x) == 1"),
    ], ids=["for-row-in-x", "len-x"])
    def test_input_of_batch_one_warns_naming_the_input(self, function, policy, expected):
        """Iterating or measuring an input of batch 1 warns, naming the input, as other decisions on size 1 do."""
        with pytest.warns(specfx.SpecializationWarning) as caught:
            specfx.trace(function, torch.randn(1, 3), policy=policy)
        (warning,) = [w for w in caught if w.category is specfx.SpecializationWarning]
        line = line_of(function, "return")
        assert f"  {expected} at {THIS_FILE}:{line} (from input x)" in \
            str(warning.message).splitlines()

    def test_empty_input_warns(self):
        """A batch of 0 is degenerate too."""
        with pytest.warns(specfx.SpecializationWarning, match=r"len\(x\) == 0 at .* \(from input x\)"):
            specfx.trace(_length, torch.randn(0, 3), policy="iter")

    def test_count_fixed_by_the_code_is_quiet(self):
        """`row, = x` fixes the count in the code (eager raises on another): no warning."""
        import warnings

        def single(x):
            row, = x
            return row

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            specfx.trace(single, torch.randn(1, 3))

    def test_once_per_source_line(self):
        """A decision repeated on one line (a loop over layers) is listed once."""

        def layers(x):
            for _ in range(3):
                x = torch.stack([row + 1 for row in x])
            return x

        with pytest.warns(specfx.SpecializationWarning) as caught:
            specfx.trace(layers, torch.randn(1, 3), policy="iter")
        message = str(caught[0].message)
        assert message.startswith("3 specialization(s) were decided") and message.count(" at ") == 1
