"""Guards in traced graphs: each kind fires on a violating input, passes on a
satisfying one, explains itself, survives the usual GraphModule transforms,
can be turned off, and is emitted exactly once per specialization."""

from __future__ import annotations

import copy
import inspect
import io
import os
import pickle
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import GuardError, Policy

GUARD_FUNCTIONS = frozenset(getattr(specfx, name) for name in dir(specfx) if name.startswith("guard_"))


def source_line(function, snippet):
    """(line number, stripped text) of the unique line of ``function`` containing ``snippet``."""
    lines, start = inspect.getsourcelines(function)
    hits = [(start + offset, line.strip()) for offset, line in enumerate(lines) if snippet in line]
    assert len(hits) == 1, f"{snippet!r} is not on exactly one line of {function.__qualname__}"
    return hits[0]


def guard_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in GUARD_FUNCTIONS]


def assert_same_as_eager(gm, model, *args, **kwargs):
    torch.testing.assert_close(gm(*args, **kwargs), model(*args, **kwargs))


# -- tiny models, one per guard kind ------------------------------------------------------------


def unpack_chunks(x):
    a, b = torch.chunk(x, 2)
    return a * b


def len_of_split(x):
    parts = torch.split(x, 2)
    return parts[0] * len(parts)


def loop_over_split(x):
    total = x.new_zeros(())
    for part in torch.split(x, 2):
        total = total + part.sum()
    return total


def enumerate_split(x):
    return [part * i for i, part in enumerate(torch.split(x, 2))]


def branch_on_data(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def branch_on_batch(x):
    if x.shape[0] > 1:
        return x - x.mean(0)
    return x


def reshape_by_shape(x):
    return x.reshape(x.shape[:1] + (-1,))  # a slice of the shape: the whole shape is read


def reshape_by_size_dim(x):
    return x.reshape(x.size(0), -1)


def view_as_size(x):
    return x.view(x.size()) + 1


def sum_last_by_ndim(x):
    return x.sum(x.ndim - 1)


def sum_last_by_dim(x):
    return x.sum(x.dim() - 1)


def flatten_by_numel(x):
    return x.reshape(x.numel())


def flatten_by_sizes(x):
    return x.reshape(x.size(0) * x.size(1))


def scale_by_int(x):
    return x * int(x.sum())


def scale_by_float(x):
    return x * float(x.sum())


def repeat_by_index(x):
    return [x * i for i in range(x.sum().long())]


def scale_by_item(x):
    return x * x.sum().item()


def scale_by_tolist(x):
    return [x * v for v in x.tolist()]


def scale_by_max_item(x):
    return x * x.max().item()


def upcast_by_dtype(x):
    return x * 2 if x.dtype == torch.float32 else x.double() * 3


def sum_dict(features):
    return sum(features[key] * 2 for key in features)


def optional_mask(x, mask=None):
    if mask is None:
        return x + 1
    return x * mask


def tensor_or_number(x):
    if isinstance(x, torch.Tensor):
        return x + 1
    return torch.tensor(x)


def check_guard(model, example, policy, kind, satisfying, violating, example_kwargs=None):
    """Trace; the recorded kind, a guard node, eager-equal outputs on satisfying inputs, GuardError on violating ones."""
    gm = specfx.trace(model, example, example_kwargs, policy=policy)
    (record,) = gm.specializations
    assert record.kind == kind
    (node,) = guard_nodes(gm)
    assert node.name == record.guard
    assert f"specfx_{node.target.__name__}(" in gm.code
    for args, kwargs in satisfying:
        assert_same_as_eager(gm, model, *args, **kwargs)
    for args, kwargs in violating:
        with pytest.raises(GuardError):
            gm(*args, **kwargs)
    return gm


def inputs(*args, **kwargs):
    return args, kwargs


class TestIterLenGuards:
    @pytest.mark.parametrize(
        ("model", "kind", "policy"),
        [
            (unpack_chunks, "unpack", None),
            (len_of_split, "len", Policy(iter=True)),
            (loop_over_split, "iter", Policy(iter=True)),
            (enumerate_split, "iter", Policy(iter=True)),
        ],
        ids=["unpack", "len", "for-loop", "enumerate"],
    )
    def test_length_guard(self, model, kind, policy):
        """A baked-in element count holds for inputs of the same count and raises GuardError for another count."""
        check_guard(
            model, torch.arange(4.0), policy, kind,
            satisfying=[inputs(torch.randn(4)), inputs(torch.randn(3))],
            violating=[inputs(torch.randn(6)) if kind != "unpack" else inputs(torch.randn(1))],
        )


@pytest.fixture(scope="module")
def branch_on_batch_gm():
    return specfx.trace(branch_on_batch, torch.randn(3, 4), policy=Policy(bool=True))


class TestBoolGuards:
    def test_branch_on_data(self):
        """A branch taken on data holds while the predicate keeps its truth value and raises GuardError otherwise."""
        check_guard(
            branch_on_data, torch.ones(3), Policy(bool=True), "bool",
            satisfying=[inputs(torch.rand(3) + 0.1), inputs(torch.rand(5) + 0.1)],
            violating=[inputs(-torch.ones(3))],
        )

    def test_branch_not_taken_on_data(self):
        """Traced on the False side of the branch, an input that makes the predicate True raises GuardError."""
        check_guard(
            branch_on_data, -torch.ones(3), Policy(bool=True), "bool",
            satisfying=[inputs(-torch.rand(3) - 0.1)],
            violating=[inputs(torch.ones(3))],
        )

    def test_branch_on_shape_predicate_keeps_shapes_symbolic(self):
        """`if x.shape[0] > 1` under BOOL alone guards the predicate, so every batch size above 1 keeps working."""
        gm = check_guard(
            branch_on_batch, torch.randn(3, 4), Policy(bool=True), "bool",
            satisfying=[inputs(torch.randn(2, 4)), inputs(torch.randn(7, 4)), inputs(torch.randn(5, 2))],
            violating=[inputs(torch.randn(1, 4))],
        )
        assert "specfx_guard_shape" not in gm.code and "specfx_guard_size" not in gm.code

    @settings(max_examples=25, deadline=None)
    @given(batch=st.integers(min_value=0, max_value=12), features=st.integers(min_value=1, max_value=5))
    def test_shape_predicate_decides_exactly_the_batch_sizes(self, branch_on_batch_gm, batch, features):
        """For any input shape, the graph matches eager exactly when `x.shape[0] > 1` holds and raises GuardError otherwise."""
        gm = branch_on_batch_gm
        x = torch.randn(batch, features)
        if batch > 1:
            assert_same_as_eager(gm, branch_on_batch, x)
        else:
            with pytest.raises(GuardError, match=re.escape("bool(x.shape[0] > 1) == True")):
                gm(x)


class TestShapeGuards:
    @pytest.mark.parametrize(
        ("model", "kind", "violating"),
        [
            (reshape_by_shape, "shape", [torch.randn(3, 3), torch.randn(1, 3), torch.randn(2, 2)]),
            (reshape_by_size_dim, "size", [torch.randn(3, 3), torch.randn(1, 3)]),
            (view_as_size, "shape", [torch.randn(2, 4), torch.randn(2, 2), torch.randn(1, 3)]),
            (sum_last_by_ndim, "ndim", [torch.randn(2, 3, 2), torch.randn(6)]),
            (sum_last_by_dim, "ndim", [torch.randn(2, 3, 2), torch.randn(6)]),
            (flatten_by_numel, "numel", [torch.randn(3, 3), torch.randn(1, 3)]),
        ],
        ids=["shape", "size(d)", "size()", "ndim", "dim()", "numel()"],
    )
    def test_shape_guard(self, model, kind, violating):
        """A shape read as Python ints holds for tensors of that shape and raises GuardError for
        another shape, smaller or larger."""
        check_guard(
            model, torch.randn(2, 3), Policy(shapes=True), kind,
            satisfying=[inputs(torch.randn(2, 3))],
            violating=[inputs(x) for x in violating],
        )

    def test_each_dimension_read_is_its_own_decision(self):
        """`x.size(0)` and `x.size(1)` of one tensor are two decisions with a guard each: a change
        in either dimension raises GuardError."""
        gm = specfx.trace(flatten_by_sizes, torch.randn(2, 3), policy=Policy(shapes=True))
        assert [(s.kind, s.expression, s.value) for s in gm.specializations] == [
            ("size", "x.size(0)", 2), ("size", "x.size(1)", 3)]
        assert len(guard_nodes(gm)) == 2
        assert_same_as_eager(gm, flatten_by_sizes, torch.randn(2, 3))
        for violating, expression in ((torch.randn(3, 3), r"x.size\(0\)"), (torch.randn(2, 4), r"x.size\(1\)")):
            with pytest.raises(GuardError, match=expression):
                gm(violating)


class TestScalarGuards:
    @pytest.mark.parametrize(
        ("model", "kind", "violating"),
        [
            (scale_by_int, "int", torch.ones(3)),
            (scale_by_float, "float", torch.full((2,), 0.25)),
            (repeat_by_index, "index", torch.ones(3)),
            (scale_by_item, "item", torch.full((2,), 0.25)),
            (scale_by_tolist, "tolist", torch.tensor([1.0, 3.0])),
        ],
        ids=["int", "float", "index", "item", "tolist"],
    )
    def test_scalar_guard(self, model, kind, violating):
        """A number read from tensor data holds while the data gives the same number and raises GuardError otherwise."""
        check_guard(
            model, torch.ones(2), Policy(scalars=True), kind,
            satisfying=[inputs(torch.ones(2))],
            violating=[inputs(violating)],
        )


class TestScalarTypes:
    """`.item()` and `.tolist()` give a Python int, float or bool as the tensor's dtype says, and
    eager's result follows that type (an int64 tensor times an int stays int64): the same
    number of another type is another value."""

    @pytest.mark.parametrize(
        ("model", "kind", "example", "other"),
        [
            (scale_by_item, "item", torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.int64)),
            (scale_by_item, "item", torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.float32)),
            (scale_by_max_item, "item", torch.ones(2), torch.ones(2, dtype=torch.bool)),
            (scale_by_tolist, "tolist", torch.ones(2), torch.ones(2, dtype=torch.int32)),
        ],
        ids=["float-then-int", "int-then-float", "float-then-bool", "tolist-float-then-int"],
    )
    def test_the_same_number_of_another_type_fails_the_guard(self, model, kind, example, other):
        gm = specfx.trace(model, (example,), policy=Policy(scalars=True))
        (record,) = gm.specializations
        assert record.kind == kind
        assert_same_as_eager(gm, model, example.clone())
        read = {scale_by_item: lambda x: x.sum().item(), scale_by_max_item: lambda x: x.max().item(),
                scale_by_tolist: lambda x: x.tolist()}[model]
        traced, given = read(example), read(other)
        assert traced == given  # the same number: only its Python type differs
        with pytest.raises(GuardError, match=re.escape(
                f"assuming {record.expression} == {traced!r}, but for this input {record.expression} == {given!r}.")):
            gm(other)

    @pytest.mark.parametrize("model", [scale_by_int, scale_by_float, repeat_by_index], ids=["int", "float", "index"])
    def test_int_float_and_index_give_one_type_whatever_the_dtype(self, model):
        """`int()`, `float()` and `operator.index()` answer one Python type for every dtype: the
        same number read from an int64 or float64 input passes the guard, and the graph returns
        eager's result, dtype included."""
        gm = specfx.trace(model, (torch.ones(2),), policy=Policy(scalars=True))
        for x in (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.float64)):
            assert_same_as_eager(gm, model, x)


class TestDtypeGuard:
    def test_a_dtype_read_by_the_code(self):
        """`x.dtype == torch.float32` bakes in the float32 branch (a decision the code itself fixes):
        another float32 input passes, a float64 or int64 one raises GuardError naming the dtype."""
        gm = check_guard(
            upcast_by_dtype, torch.ones(3), None, "dtype",
            satisfying=[inputs(torch.randn(5))],
            violating=[inputs(torch.ones(3, dtype=torch.float64)), inputs(torch.ones(3, dtype=torch.int64))],
        )
        with pytest.raises(GuardError, match=r"x.dtype == torch.float32, but for this input x.dtype == torch.float64"):
            gm(torch.ones(3, dtype=torch.float64))


class TestKeysGuard:
    def test_iterating_a_dict_input(self):
        """A dict input's keys are part of its structure, checked at graph entry before any compute:
        other values pass, other keys (or another order) raise GuardError naming the input."""
        example = {"a": torch.ones(2), "b": torch.zeros(2)}
        gm = specfx.trace(sum_dict, (example,), policy=Policy(iter=True))
        assert gm.specializations == [] and guard_nodes(gm) == []
        assert_same_as_eager(gm, sum_dict, {"a": torch.randn(2), "b": torch.randn(2)})
        for violating in ({"a": torch.randn(2)}, {"b": torch.ones(2), "a": torch.ones(2)},
                          {"a": torch.ones(2), "b": torch.ones(2), "c": torch.ones(2)}):
            with pytest.raises(GuardError, match=r"features has keys \("):
                gm(violating)


class TestIsNoneGuard:
    def test_none_example_kwarg_later_given_a_tensor(self):
        """An example kwarg that is None bakes in the None branch; passing a tensor later raises GuardError."""
        check_guard(
            optional_mask, (torch.ones(3),), None, "is_none",
            example_kwargs={"mask": None},
            satisfying=[inputs(torch.randn(3)), inputs(torch.randn(3), mask=None)],
            violating=[inputs(torch.randn(3), mask=torch.zeros(3)), inputs(torch.randn(3), torch.zeros(3))],
        )


class TestIsTensorGuard:
    def test_isinstance_check_on_an_input(self):
        """`isinstance(x, torch.Tensor)` on an input bakes in the tensor branch; a non-tensor raises GuardError."""
        check_guard(
            tensor_or_number, torch.ones(3), None, "type",
            satisfying=[inputs(torch.randn(5))],
            violating=[inputs(3.0), inputs([1.0, 2.0])],
        )


# -- the error a user reads ---------------------------------------------------------------------


class Splitter(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        split = torch.split(x, 2, dim=1)
        return self.proj(torch.cat([*split], dim=1))


def violation(gm, *args):
    with pytest.raises(GuardError) as info:
        gm(*args)
    return info.value


@pytest.fixture(scope="module")
def splitter_gm():
    return specfx.trace(Splitter(), torch.randn(3, 4), policy=Policy(iter=True))


class TestGuardErrorMessage:
    def test_names_assumption_and_actual_value(self, splitter_gm):
        """The message states the assumption baked in and what this input gave instead."""
        message = str(violation(splitter_gm, torch.randn(3, 6)))
        assert "len(split) == 2" in message
        assert "len(split) == 3" in message

    def test_points_at_the_users_source_line(self, splitter_gm):
        """The message says `assumed at <file>:<line>: <source text>` for the line that iterated."""
        lineno, text = source_line(Splitter.forward, "[*split]")
        message = str(violation(splitter_gm, torch.randn(3, 6)))
        match = re.search(r"assumed at (\S+):(\d+): (.*)", message)
        assert match is not None, message
        assert os.path.samefile(match.group(1), __file__)
        assert int(match.group(2)) == lineno
        assert match.group(3).strip() == text

    def test_says_how_to_retrace(self, splitter_gm):
        """The message tells the user to retrace with an input like the failing one."""
        message = str(violation(splitter_gm, torch.randn(3, 6)))
        assert "retrace" in message.lower()
        assert "specfx.trace(" in message

    def test_is_a_runtime_error_and_a_specfx_error(self, splitter_gm):
        """GuardError is caught by `except RuntimeError` and by `except specfx.SpecfxError`."""
        error = violation(splitter_gm, torch.randn(3, 6))
        assert isinstance(error, RuntimeError)
        assert isinstance(error, specfx.SpecfxError)

    def test_expected_and_actual_attributes(self, splitter_gm):
        """`.expected` is the traced value and `.actual` the value this input gave."""
        error = violation(splitter_gm, torch.randn(3, 6))
        assert (error.expected, error.actual) == (2, 3)

    def test_survives_pickling(self, splitter_gm):
        """A pickled GuardError (e.g. from a worker process) keeps its message and fields."""
        error = violation(splitter_gm, torch.randn(3, 6))
        copy_ = pickle.loads(pickle.dumps(error))
        assert type(copy_) is GuardError
        assert str(copy_) == str(error)
        assert (copy_.expected, copy_.actual, copy_.where) == (error.expected, error.actual, error.where)

    def test_identity_guard_message(self):
        """An is-None guard says `mask is None` was assumed and that this input's mask is not None."""
        gm = specfx.trace(optional_mask, (torch.ones(3),), {"mask": None})
        message = str(violation(gm, torch.ones(3), torch.ones(3)))
        assert "mask is None" in message
        assert "mask is not None" in message


# -- survival across GraphModule transforms -----------------------------------------------------


class Gated(nn.Module):
    """A length guard (split) and a BOOL guard on a shape predicate."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        split = torch.split(x, 2, dim=1)
        y = torch.cat([*split], dim=1)
        if x.shape[0] > 1:
            y = y - y.mean(0)
        return self.proj(y)


def dead_code_eliminated(gm):
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def pickled(gm):
    return pickle.loads(pickle.dumps(gm))


def saved_and_loaded(gm):
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def fx_retraced(gm):
    return torch.fx.symbolic_trace(gm)


def specfx_retraced(gm):
    return specfx.trace(gm, torch.randn(3, 4))


def specfx_retraced_symbolically(gm):
    return specfx.trace(gm)


TRANSFORMS = [
    dead_code_eliminated, copy.deepcopy, pickled, saved_and_loaded,
    fx_retraced, specfx_retraced, specfx_retraced_symbolically,
]
KEEPS_RECORDS = {copy.deepcopy, pickled, saved_and_loaded, dead_code_eliminated}


@pytest.fixture
def gated():
    model = Gated()
    return model, specfx.trace(model, torch.randn(3, 4), policy=Policy(iter=True, bool=True))


class TestGuardSurvival:
    @pytest.mark.parametrize("transform", TRANSFORMS, ids=lambda t: t.__name__)
    def test_guard_nodes_stay_in_code(self, gated, transform):
        """Both guard calls are still in the generated code after the transform."""
        _, gm = gated
        result = transform(gm)
        assert "specfx_guard_len" in result.code
        assert "specfx_guard_truth" in result.code

    @pytest.mark.parametrize("transform", TRANSFORMS, ids=lambda t: t.__name__)
    def test_guards_still_fire(self, gated, transform):
        """The transformed graph still raises GuardError on inputs violating either assumption."""
        _, gm = gated
        result = transform(gm)
        with pytest.raises(GuardError, match=re.escape("len(split) == 2")):
            result(torch.randn(3, 6))
        with pytest.raises(GuardError, match=re.escape("bool(x.shape[0] > 1) == True")):
            result(torch.randn(1, 4))

    @pytest.mark.parametrize("transform", TRANSFORMS, ids=lambda t: t.__name__)
    def test_outputs_equal_eager(self, gated, transform):
        """The transformed graph computes what the eager model does on valid inputs."""
        model, gm = gated
        result = transform(gm)
        for x in (torch.randn(3, 4), torch.randn(8, 4)):
            torch.testing.assert_close(result(x), model(x))

    @pytest.mark.parametrize("transform", sorted(KEEPS_RECORDS, key=lambda t: t.__name__), ids=lambda t: t.__name__)
    def test_specializations_preserved(self, gated, transform):
        """`gm.specializations` comes through recompile, deepcopy, pickling and torch.save unchanged."""
        _, gm = gated
        records = list(gm.specializations)
        result = transform(gm)
        assert result.specializations == records
        assert {s.guard for s in result.specializations} <= {n.name for n in result.graph.nodes}

    @pytest.mark.skipif(
        not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported(),
        reason="torch.compile is unavailable here",
    )
    def test_torch_compile_keeps_guards(self):
        """A graph compiled with torch.compile(backend='eager') still raises GuardError on a violating input."""
        gm = specfx.trace(unpack_chunks, torch.arange(4.0))
        try:
            compiled = torch.compile(gm, backend="eager")
            torch.testing.assert_close(compiled(torch.arange(6.0)), unpack_chunks(torch.arange(6.0)))
            with pytest.raises(GuardError):
                compiled(torch.ones(1))
        finally:
            torch._dynamo.reset()


class TestGuardNamesInGeneratedCode:
    """Generated code calls guard X as ``specfx_guard_X``: torch.fx's own name for a
    function of the ``specfx`` package (docs/architecture.md, "Guard nodes", says why
    not ``specfx.guards.guard_X``). That name must be the public function itself,
    and a pickled graph must import it from the public package."""

    @pytest.mark.parametrize("guard", sorted(set(specfx.guards.GUARDS.values()), key=lambda g: g.__name__),
                             ids=lambda g: g.__name__)
    def test_every_guard_is_importable_from_the_public_package(self, guard):
        """What a pickle's import block names (``from specfx import guard_X``) is the
        guard specfx.guards defines, so graphs load without private module paths."""
        assert guard.__module__ == "specfx"
        assert getattr(specfx, guard.__name__) is guard
        assert getattr(specfx.guards, guard.__name__) is guard

    @pytest.mark.parametrize("transform", TRANSFORMS, ids=lambda t: t.__name__)
    def test_printed_name_is_the_guard_itself(self, gated, transform):
        """``specfx_guard_len`` in the code is bound to specfx.guards.guard_len, before and after the transform."""
        result = transform(gated[1])
        names = {name: result.forward.__globals__[name] for name in re.findall(r"\b(specfx_guard_\w+)\(", result.code)}
        assert names == {"specfx_guard_len": specfx.guards.guard_len,
                         "specfx_guard_truth": specfx.guards.guard_truth}

    def test_pickle_imports_guards_from_the_public_package(self, gated):
        """The import block that unpickling executes takes the guards from the public package."""
        _, (_, import_block) = gated[1].__reduce__()
        guard_imports = sorted(line for line in import_block.splitlines() if "guard_" in line)
        assert guard_imports == ["from specfx import guard_len as specfx_guard_len",
                                 "from specfx import guard_truth as specfx_guard_truth"]


class TestGuardStatements:
    """A guard returns nothing; its result is handed to ``specfx_guarded``, the call the graph's
    output passes through (so consumers that delete unused nodes keep the guards). The values
    a guard was the last user of are still released right after it, and a guard nothing uses
    (a graph edited by hand) is written as a statement of its own, binding no name."""

    @pytest.mark.parametrize("transform", [t for t in TRANSFORMS if t is not fx_retraced], ids=lambda t: t.__name__)
    def test_guards_feed_the_output(self, gated, transform):
        result = transform(gated[1])
        guards = [n for n in result.graph.nodes if n.target in specfx.guards.GUARD_FUNCTIONS]
        assert len(guards) == 2
        (join,) = [n for n in result.graph.nodes if n.target is specfx.guarded]
        assert all(list(node.users) == [join] for node in guards)
        assert re.search(r"^ +guard_len = specfx_guard_len\(split, 2, 'len\(split\)', 'tests/test_guards.py:\d+: ",
                         result.code, re.M)
        assert re.search(r"^ +guarded = specfx_guarded\(proj, guard_len, guard_truth\)", result.code, re.M)

    def test_a_guard_nothing_uses_is_a_bare_call(self, gated):
        gm = copy.deepcopy(gated[1])
        (join,) = [n for n in gm.graph.nodes if n.target is specfx.guarded]
        join.replace_all_uses_with(join.args[0])
        gm.graph.erase_node(join)
        gm.recompile()
        for node in gm.graph.nodes:
            if node.target in specfx.guards.GUARD_FUNCTIONS:
                assert not re.search(rf"\b{node.name}\b", gm.code)
        assert re.search(r"^ +specfx_guard_len\(split, 2, 'len\(split\)', 'tests/test_guards.py:\d+: ", gm.code, re.M)

    @pytest.mark.parametrize("colored", [False, True])
    def test_a_value_last_used_by_a_guard_is_released_after_it(self, colored):
        def branch(x):
            if x.sum() > 0:
                return x + 1
            return x - 1

        gm = specfx.trace(branch, torch.ones(3), policy=Policy(bool=True))
        code = re.sub(r"\x1b\[[0-9;]*m", "", gm.graph.python_code("self", colored=colored).src)
        assert "    guard_truth = specfx_guard_truth(gt, True, 'bool(x.sum() > 0)', " in code
        guard_line = next(line for line in code.splitlines() if "specfx_guard_truth" in line)
        assert guard_line.endswith(";  gt = None")
        assert torch.equal(gm(torch.ones(3)), torch.full((3,), 2.0))
        with pytest.raises(GuardError, match=re.escape("bool(x.sum() > 0) == True")):
            gm(-torch.ones(3))

    def test_each_line_maps_to_its_node(self, gated):
        """torch.fx's line -> node map (tracebacks, profilers) still points at the guard calls."""
        gm = gated[1]
        code = gm.graph.python_code("self")
        lines, nodes = code.src.splitlines(), list(gm.graph.nodes)
        guard_lines = {nodes[index].name: lines[lineno + code._prologue_start - 1].strip()
                       for lineno, index in code._lineno_map.items()
                       if index is not None and nodes[index].target in specfx.guards.GUARD_FUNCTIONS}
        assert guard_lines.keys() == {"guard_len", "guard_truth"}
        assert all(line.startswith(f"{name} = specfx_{name}(") for name, line in guard_lines.items())


# -- guards=False ---------------------------------------------------------------------------------


class Mixed(nn.Module):
    """Several kinds of specialization in one forward."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, features, mask=None):
        assert isinstance(x, torch.Tensor)
        a, b = torch.chunk(x, 2, dim=1)
        h = torch.cat([a, b], dim=1)
        for part in torch.split(h, 2, dim=0):
            h = h + part.sum()
        if h.sum() > 0:
            h = h * 2
        h = h.reshape(x.shape[0], -1) * float(x.max())
        for key in features:
            h = h + features[key]
        return self.proj(h)


MIXED_EXAMPLE = (torch.rand(4, 4), {"u": torch.ones(4), "v": torch.ones(4)})
MIXED_KINDS = {"is_none", "type", "unpack", "iter", "bool", "size", "float"}  # the dict input's keys: entry check


@pytest.fixture(scope="module")
def unguarded():
    return specfx.trace(Mixed(), MIXED_EXAMPLE, {"mask": None}, policy=Policy(specfx.Specialize.ALL),
                        guards=False)


class TestGuardsDisabled:

    def test_no_guard_nodes(self, unguarded):
        """With guards=False the graph contains no guard calls at all."""
        assert "specfx_guard" not in unguarded.code
        assert guard_nodes(unguarded) == []

    def test_specializations_still_recorded_unguarded(self, unguarded):
        """Every decision is still listed in `gm.specializations`, each with `guard is None`."""
        assert {s.kind for s in unguarded.specializations} == MIXED_KINDS
        assert all(s.guard is None for s in unguarded.specializations)

    def test_explain_says_not_guarded(self, unguarded):
        """explain() flags every row and the summary as not guarded."""
        report = specfx.explain(unguarded)
        summary, _header, *rows = report.splitlines()
        assert "NONE guarded" in summary
        assert rows and all("NOT GUARDED" in row for row in rows)

    def test_violating_input_is_not_checked(self, unguarded):
        """An input that breaks an assumption runs without GuardError (the documented unsafety)."""
        unguarded(torch.rand(4, 4), {"u": torch.ones(4), "v": torch.ones(4)}, mask=torch.ones(4))


# -- bookkeeping: one guard per specialization -----------------------------------------------------


@pytest.fixture(scope="module")
def mixed_gm():
    return specfx.trace(Mixed(), MIXED_EXAMPLE, {"mask": None}, policy=Policy(specfx.Specialize.ALL))


class TestOneGuardPerSpecialization:

    def test_each_record_has_its_own_guard(self, mixed_gm):
        """Every specialization names a distinct guard node."""
        records = mixed_gm.specializations
        assert {s.kind for s in records} == MIXED_KINDS
        assert None not in {s.guard for s in records}
        assert len({s.guard for s in records}) == len(records)

    def test_guard_names_are_guard_nodes(self, mixed_gm):
        """Each `s.guard` is an existing node calling a specfx guard function, and there are no others."""
        nodes = {n.name: n for n in mixed_gm.graph.nodes}
        for record in mixed_gm.specializations:
            assert nodes[record.guard].op == "call_function"
            assert nodes[record.guard].target in GUARD_FUNCTIONS
        assert len(guard_nodes(mixed_gm)) == len(mixed_gm.specializations)

    def test_repeated_iteration_guards_length_once(self):
        """`*x`, `tuple(x)` and `len(x)` on one value give one length record and one length guard."""

        def spread_twice(x):
            parts = torch.split(x, 2)
            first = torch.cat([*parts])
            second = torch.stack(tuple(parts)[:2])
            return first.sum() + second.sum() * len(parts)

        gm = specfx.trace(spread_twice, torch.randn(6), policy=Policy(iter=True))
        assert [s.kind for s in gm.specializations] == ["iter"]
        assert [n.target for n in guard_nodes(gm)] == [specfx.guard_len]
        with pytest.raises(GuardError):
            gm(torch.randn(8))
        assert_same_as_eager(gm, spread_twice, torch.randn(5))
