"""``specfx.trace`` without example inputs is ``torch.fx.symbolic_trace``.

For code that ``symbolic_trace`` can trace, both must record the same nodes
(op, target, name, argument structure) and generate the same ``gm.code``; for
code it cannot trace, specfx raises a ``TraceError`` subclass whose message
keeps FX's own text and adds the fix (pass example inputs). With example inputs,
FX-traceable code keeps its graph too, except for the guards that the examples
make possible (pinned below).
"""

from __future__ import annotations

import math
import operator
import re
from math import sqrt
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.node import Node, map_aggregate
from torch.fx.proxy import TraceError

import specfx
from specfx._trace.options import ENTRY_CHECKS  # input type/concrete_args checks at graph entry
from specfx import Policy, SpecializationError


def scaled_residual(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Data-dependent inside, so it is only traceable as a leaf call."""
    if x.sum() > 0:
        return x + alpha * y
    return x - alpha * y


torch.fx.wrap("scaled_residual")


# -- models torch.fx.symbolic_trace can trace ---------------------------------------------------


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + x


class Nested(nn.Module):
    """Submodules two levels deep, one called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.head = nn.Sequential(nn.Linear(4, 3), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(self.inner(x)))


class DirectParameters(nn.Module):
    """Parameters used directly in arithmetic, and twice."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))
        self.bias = nn.Parameter(torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias * self.bias.sum()


class Buffers(nn.Module):
    """Buffers and a plain tensor constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.randn(4))
        self.register_buffer("scale", torch.rand(4) + 0.5)
        self.constant = torch.ones(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) * self.scale + self.constant


class SymbolicSizes(nn.Module):
    """x.size(0) / x.shape[1] / x.shape[-1] flow into ops as symbols."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.reshape(x.size(0), x.shape[1], -1)
        return y.sum(-1) / x.shape[-1] + x.size(0) * 2


class Views(nn.Module):
    """view/permute/slicing/None indexing and keyword arguments."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.view(-1, 4).permute(1, 0).contiguous().view(2, -1)
        return y[:, 1:3, None].sum(dim=-1, keepdim=True) + F.layer_norm(y, (y.shape[-1],))[:, :2, None]


class LSTMUnpack(nn.Module):
    """Tuple unpacking of a leaf module's output: `out, (h, c) = self.lstm(x)`."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, c) = self.lstm(x)
        return out.sum(1) + h[-1] * c[-1]


class Wrapped(nn.Module):
    """A torch.fx.wrap'ed function called positionally and with a keyword."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return scaled_residual(x, y) + scaled_residual(y, x, alpha=0.5)


class Autowrapped(nn.Module):
    """math.sqrt on a symbolic size (autowrap_modules=(math,)), both spellings."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / math.sqrt(x.size(-1)) + sqrt(x.shape[0])


class ConcreteFlag(nn.Module):
    """A Python-bool argument that concrete_args bakes in."""

    def forward(self, x: torch.Tensor, flag: bool) -> torch.Tensor:
        if flag:
            return x * 2
        return x - 1


class Defaults(nn.Module):
    """Default arguments, one used as a number."""

    def forward(self, x: torch.Tensor, scale: float = 2.0, shift: int = 1) -> torch.Tensor:
        return x * scale + shift


class StarArgs(nn.Module):
    """*args indexed by position."""

    def forward(self, x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return x + rest[0] * rest[1]


class Stats(NamedTuple):
    mean: torch.Tensor
    std: torch.Tensor


class TupleAndDictMethods(nn.Module):
    """Helper methods returning a tuple, a NamedTuple and a dict; forward returns a dict."""

    def moments(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x.mean(-1), x.std(-1)

    def stats(self, x: torch.Tensor) -> Stats:
        return Stats(x.mean(0), x.std(0))

    def parts(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"double": x * 2, "shifted": x + 1}

    def forward(self, x: torch.Tensor) -> Dict[str, Any]:
        m, s = self.moments(x)
        stats = self.stats(x)
        parts = self.parts(x)
        total = parts["double"] + parts["shifted"]
        return {"mean": m, "pair": (m, s), "stats": [stats.mean, stats.std], "sum": total}


class ConvBlock(nn.Module):
    """Conv2d + BatchNorm2d leaves, functional relu/pool, flatten, torch.cat of a list."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return torch.cat([y.flatten(1), y.mean(dim=(2, 3))], dim=1)


class ScalarMethods(nn.Module):
    """.item() stays a call_method node without SCALARS (x.dtype is read as a guarded value: see test_tracer)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum().item() + torch.zeros(x.shape)


class Case(NamedTuple):
    make: Callable[[], Any]
    example_inputs: Tuple[Any, ...]
    concrete_args: Optional[Dict[str, Any]] = None


CASES: Dict[str, Case] = {
    "nested-submodules": Case(Nested, (torch.randn(2, 4),)),
    "sequential": Case(
        lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (torch.randn(3, 4),)
    ),
    "direct-parameters": Case(DirectParameters, (torch.randn(2, 4),)),
    "buffers": Case(Buffers, (torch.randn(2, 4),)),
    "symbolic-sizes": Case(SymbolicSizes, (torch.randn(2, 3, 4),)),
    "views": Case(Views, (torch.randn(2, 8),)),
    "lstm-unpack": Case(LSTMUnpack, (torch.randn(2, 3, 4),)),
    "fx-wrap": Case(Wrapped, (torch.randn(3), torch.randn(3))),
    "math-autowrap": Case(Autowrapped, (torch.randn(2, 4),)),
    "concrete-args": Case(ConcreteFlag, (torch.randn(2, 3),), {"flag": True}),
    "defaults": Case(Defaults, (torch.randn(2, 3),)),
    "star-args": Case(StarArgs, (torch.randn(2, 3), torch.randn(3), torch.randn(3))),
    "tuple-and-dict-methods": Case(TupleAndDictMethods, (torch.randn(3, 4),)),
    "conv-block": Case(ConvBlock, (torch.randn(2, 3, 4, 4),)),
    "scalar-methods": Case(ScalarMethods, (torch.randn(2, 3),)),
    "function": Case(
        lambda: (lambda x, y: torch.addmm(y, x, x.t(), beta=0.5).relu()),
        (torch.randn(3, 3), torch.randn(3, 3)),
    ),
}


def unjoined(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with its output no longer routed through ``specfx.guarded`` (the call that makes the
    output depend on the guards, specfx/_graph/guard_flow.py), in place."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is specfx.guarded:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


def node_signature(gm: torch.fx.GraphModule, *, drop_guards: bool = False) -> List[Tuple[Any, ...]]:
    """(op, target, name, args, kwargs) per node, with argument nodes replaced by their names."""
    if drop_guards:
        unjoined(gm)

    def structure(value: Any) -> Any:
        return map_aggregate(value, lambda a: ("%node", a.name) if isinstance(a, Node) else a)

    nodes = [n for n in gm.graph.nodes if not (drop_guards and (is_guard(n) or n.target in ENTRY_CHECKS))]
    return [(n.op, n.target, n.name, structure(n.args), structure(n.kwargs)) for n in nodes]


def module_stacks(gm: torch.fx.GraphModule, *, drop_guards: bool = False) -> List[Tuple[str, Any]]:
    """(name, ``meta['nn_module_stack']``) per node: the module calls each node was made in."""
    if drop_guards:
        unjoined(gm)
    return [(n.name, n.meta.get("nn_module_stack")) for n in gm.graph.nodes
            if not (drop_guards and (is_guard(n) or n.target in ENTRY_CHECKS))]


def is_guard(node: Node) -> bool:
    """Whether ``node`` is a specfx guard call."""
    return node.op == "call_function" and getattr(node.target, "__name__", "").startswith("guard_") and (
        getattr(node.target, "__module__", "") == "specfx"
    )


def same_outputs(expected: Any, actual: Any) -> None:
    """Assert two (possibly nested) outputs are equal tensor by tensor."""
    expected_leaves, expected_spec = torch.utils._pytree.tree_flatten(expected)
    actual_leaves, actual_spec = torch.utils._pytree.tree_flatten(actual)
    assert actual_spec == expected_spec
    for want, got in zip(expected_leaves, actual_leaves):
        torch.testing.assert_close(got, want)


@pytest.fixture(params=sorted(CASES), name="case")
def case_fixture(request: pytest.FixtureRequest) -> Tuple[str, Any, Case]:
    """Each FX-traceable case, freshly built with a fixed seed."""
    case = CASES[request.param]
    torch.manual_seed(0)
    return request.param, case.make(), case


class TestWithoutExamples:
    """With no example inputs, specfx.trace records exactly symbolic_trace's graph."""

    def test_same_nodes(self, case):
        """The node sequence (op, target, name, argument structure) equals symbolic_trace's."""
        _, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, concrete_args=spec.concrete_args)
        assert node_signature(actual) == node_signature(expected)

    def test_same_module_stacks(self, case):
        """Every node's ``nn_module_stack`` equals symbolic_trace's (specfx copies the stack once per
        module call rather than once per node; the contents are torch.fx's)."""
        _, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, concrete_args=spec.concrete_args)
        assert module_stacks(actual) == module_stacks(expected)

    def test_same_code(self, case):
        """The generated Python code equals symbolic_trace's character for character."""
        _, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, concrete_args=spec.concrete_args)
        assert actual.code == expected.code

    def test_nothing_specialized_and_same_results(self, case):
        """Nothing is specialized, no guard is emitted and the graph computes what symbolic_trace's does."""
        _, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, concrete_args=spec.concrete_args)
        assert actual.specializations == []
        assert not any(is_guard(n) for n in actual.graph.nodes)
        if isinstance(model, nn.Module):
            model.eval()
            expected.eval()
            actual.eval()
        # symbolic_trace's graph keeps a concretized argument as an input it checks, so pass it too
        args = spec.example_inputs + tuple((spec.concrete_args or {}).values())
        same_outputs(expected(*args), actual(*args))

    def test_same_submodules_and_attributes(self, case):
        """Both graph modules copy the same submodules, parameters and buffers from the root."""
        _, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, concrete_args=spec.concrete_args)
        assert [n for n, _ in actual.named_modules()] == [n for n, _ in expected.named_modules()]
        assert sorted(actual.state_dict()) == sorted(expected.state_dict())


# Guards that example inputs add to otherwise FX-traceable code: case -> guard descriptions.
EXAMPLE_GUARDS = {
    # `out, (h, c) = self.lstm(x)`: symbolic_trace trusts the code's two names, specfx checks the length.
    "lstm-unpack": ["len(self.lstm(x)) == 2", "len(self.lstm(x)[1]) == 2"],
}


# With examples the placeholders are the inputs' leaves: `*rest` becomes one placeholder per element.
FLATTENED = {"star-args": ["x", "rest_0", "rest_1"]}


def without_entry_check(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with torch.fx's plain code generation instead of specfx's entry check."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    gm.recompile()
    return gm


def code_of(gm: torch.fx.GraphModule) -> str:
    """``gm.code`` without the return annotation (specfx resolves string annotations, which
    torch.fx prints as unimportable globals)."""
    return re.sub(r"\) -> [^\n]*:\n", "):\n", gm.code)


class TestWithExamples:
    """With example inputs, FX-traceable code keeps symbolic_trace's graph apart from the pinned guards
    and the entry check of the inputs' structure."""

    def test_same_nodes_apart_from_guards(self, case):
        """Dropping guard nodes leaves exactly symbolic_trace's nodes."""
        name, model, spec = case
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, spec.example_inputs, concrete_args=spec.concrete_args)
        if name in FLATTENED:
            assert [n.name for n in actual.graph.nodes if n.op == "placeholder"] == FLATTENED[name]
            return
        assert node_signature(actual, drop_guards=True) == node_signature(expected)

    def test_same_module_stacks_apart_from_guards(self, case):
        name, model, spec = case
        if name in FLATTENED:
            return  # other placeholders, by design (test_same_nodes_apart_from_guards)
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = specfx.trace(model, spec.example_inputs, concrete_args=spec.concrete_args)
        assert module_stacks(actual, drop_guards=True) == module_stacks(expected)

    def test_only_the_pinned_guards(self, case):
        """The only specializations example inputs add are the pinned ones (unpacking into fixed names)."""
        name, model, spec = case
        actual = specfx.trace(model, spec.example_inputs, concrete_args=spec.concrete_args)
        assert [s.guard_description for s in actual.specializations] == EXAMPLE_GUARDS.get(name, [])
        assert all(s.flag is specfx.Specialize.NONE for s in actual.specializations)
        assert sum(is_guard(n) for n in actual.graph.nodes) == len(EXAMPLE_GUARDS.get(name, []))

    def test_same_code_apart_from_guards(self, case):
        """The code equals symbolic_trace's: directly where no guard is added, else once guards are erased."""
        name, model, spec = case
        if name in FLATTENED:
            return  # other placeholders, by design (test_same_nodes_apart_from_guards)
        expected = torch.fx.symbolic_trace(model, concrete_args=spec.concrete_args)
        actual = without_entry_check(unjoined(specfx.trace(model, spec.example_inputs, concrete_args=spec.concrete_args)))
        guards = [n for n in actual.graph.nodes if is_guard(n) or n.target in ENTRY_CHECKS]  # + input checks
        if not guards:
            assert code_of(actual) == code_of(expected)
        for node in reversed(guards):  # (users first: the model check reads the node before it)
            actual.graph.erase_node(node)
        actual.recompile()
        assert code_of(actual) == code_of(expected)

    def test_tensor_meta_from_the_example(self, case):
        """Every tensor-valued node carries tensor_meta whose shape is the example run's."""
        _, model, spec = case
        actual = specfx.trace(model, spec.example_inputs, concrete_args=spec.concrete_args)
        placeholders = [n for n in actual.graph.nodes if n.op == "placeholder"]
        tensors = [a for a in spec.example_inputs if isinstance(a, torch.Tensor)]
        shapes = []
        for node in placeholders:  # a `*args` placeholder carries a tuple of metadata, one per tensor
            meta = node.meta.get("tensor_meta")
            if meta is None:  # a Python-number input (defaults, concretized flags)
                continue
            shapes += [meta.shape] if hasattr(meta, "shape") else [m.shape for m in meta]
        assert shapes == [t.shape for t in tensors]
        assert all("tensor_meta" in n.meta for n in actual.graph.nodes if n.meta.get("type") is torch.Tensor)


def defaults_none(x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    if bias is not None:
        x = x + bias
    return x * 2


class TestExampleDifferences:
    """Where example inputs legitimately change an FX-traceable graph."""

    def test_default_none_is_resolved_and_guarded(self):
        """An omitted `bias=None` becomes `bias is None` (guarded), where symbolic_trace keeps the add."""
        expected = torch.fx.symbolic_trace(defaults_none)
        actual = specfx.trace(defaults_none, (torch.randn(3),))
        assert operator.add in [n.target for n in expected.graph.nodes]
        assert operator.add not in [n.target for n in actual.graph.nodes]
        assert [s.guard_description for s in actual.specializations] == ["bias is None"]
        x = torch.randn(3)
        torch.testing.assert_close(actual(x), defaults_none(x))
        with pytest.raises(specfx.GuardError):
            actual(x, torch.ones(3))
        with pytest.raises(TypeError):  # symbolic_trace's graph adds None: it never worked for the default
            expected(x)

    def test_unpacking_guard_fires_where_eager_raises(self):
        """Unpacking guards raise GuardError on a wrong-length leaf output where eager raises ValueError."""

        class Pair(nn.Module):
            def forward(self, x):
                return x, x + 1

        class Triple(nn.Module):
            def forward(self, x):
                return x, x + 1, x + 2

        class Use(nn.Module):
            def __init__(self):
                super().__init__()
                self.pair = Pair()

            def forward(self, x):
                a, b = self.pair(x)
                return a * b

        model = Use()
        gm = specfx.trace(model, (torch.randn(2),), leaf_modules=[Pair])
        gm.pair = Triple()
        model.pair = Triple()
        with pytest.raises(ValueError):
            model(torch.randn(2))
        with pytest.raises(specfx.GuardError):
            gm(torch.randn(2))


# -- code torch.fx.symbolic_trace cannot trace -------------------------------------------------


def data_branch(x):
    if x.sum() > 0:
        return x
    return -x


def shape_branch(x):
    if x.shape[0] > 1:
        return x - x.mean(0)
    return x


def while_loop(x):
    while x.sum() > 0:
        x = x - 1
    return x


def boolean_ops(x):
    return x if (x.sum() > 0 and not x.max() > 5) else -x


def loop_over_split(x):
    return torch.cat([t * 2 for t in torch.split(x, 2)])


def star_split(x):
    return torch.stack((*torch.split(x, 2),))


def zip_unbind(x):
    out = x[0] * 0
    for a, b in zip(torch.unbind(x), torch.unbind(x.flip(0))):
        out = out + a * b
    return out


def length(x):
    return x * len(x)


def int_of_size(x):
    return x[: int(x.size(0) // 2)]


def float_of_data(x):
    return x * float(x.max())


class KeywordPresent(nn.Module):
    def forward(self, x, **kwargs):
        return x + kwargs["y"] if "y" in kwargs else x


FX_BOOL = "symbolically traced variables cannot be used as inputs to control flow"
FX_ITER = "Proxy object cannot be iterated"
FX_LEN = "'len' is not supported in symbolic tracing by default"

UNTRACEABLE = {
    "if-data": (data_branch, FX_BOOL),
    "if-shape": (shape_branch, FX_BOOL),
    "while": (while_loop, FX_BOOL),
    "and-not": (boolean_ops, FX_BOOL),
    "for-loop": (loop_over_split, FX_ITER),
    "star": (star_split, FX_ITER),
    "zip": (zip_unbind, FX_ITER),
    "in-kwargs": (KeywordPresent(), FX_ITER),  # `"y" in kwargs`: FX iterates the **kwargs proxy
}


class TestUntraceable:
    """Where symbolic_trace fails, specfx fails the same way, with FX's text and a fix."""

    @pytest.mark.parametrize("name", sorted(UNTRACEABLE))
    def test_trace_error_with_fx_message(self, name):
        """symbolic_trace raises TraceError; specfx a SpecializationError (a TraceError) with FX's message."""
        fn, fx_message = UNTRACEABLE[name]
        with pytest.raises(TraceError) as fx_error:
            torch.fx.symbolic_trace(fn)
        assert type(fx_error.value) is TraceError and fx_message in str(fx_error.value)
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(fn)
        assert isinstance(caught.value, TraceError)
        message = str(caught.value)
        assert fx_message in message
        assert "example inputs" in message and "specfx.trace(model, (example_input,)" in message

    def test_self_inside_star_args_is_refused_as_fx_does_with_examples_too(self):
        """`def forward(*args, **kwargs)` taking `self = args[0]`: torch.fx raises before tracing;
        specfx raises the same error with or without example inputs (the examples no longer
        shift into the wrong parameters and fail with IndexError)."""
        class SelfInArgs(nn.Module):
            def forward(*args, **kwargs):
                return torch.relu(args[1])

        x, y = torch.rand(1), torch.rand(1)
        with pytest.raises(RuntimeError) as fx_error:
            torch.fx.symbolic_trace(SelfInArgs())
        for examples in ((), ((x, y), {"foo": x})):
            with pytest.raises(RuntimeError) as caught:
                specfx.trace(SelfInArgs(), *examples)
            assert type(caught.value) is type(fx_error.value)
            assert str(caught.value) == str(fx_error.value) == "``self`` argument cannot be part of *args expansion!"

    def test_fx_iteration_message_is_complete(self):
        """The iteration error keeps FX's whole message, not only its first sentence."""
        with pytest.raises(TraceError) as fx_error:
            torch.fx.symbolic_trace(loop_over_split)
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(loop_over_split)
        assert str(fx_error.value) in str(caught.value)

    def test_len_contains_fx_runtime_error_text(self):
        """For len(x) symbolic_trace raises RuntimeError; specfx's SpecializationError keeps its text."""
        with pytest.raises(RuntimeError) as fx_error:
            torch.fx.symbolic_trace(length)
        assert FX_LEN in str(fx_error.value)
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(length)
        assert str(fx_error.value) in str(caught.value)
        assert "example inputs" in str(caught.value)

    @pytest.mark.parametrize(
        "fn, fx_exception",
        [
            pytest.param(length, RuntimeError, id="len"),
            pytest.param(int_of_size, TypeError, id="int"),
        ],
    )
    def test_except_clause_for_fx_error_still_catches(self, fn, fx_exception):
        """An `except` clause written for symbolic_trace's exception also catches specfx's."""
        with pytest.raises(fx_exception):
            torch.fx.symbolic_trace(fn)
        try:
            specfx.trace(fn)
        except fx_exception:
            pass

    @pytest.mark.parametrize(
        "fn",
        [
            data_branch,
            shape_branch,
            loop_over_split,
            zip_unbind,
            length,
            float_of_data,
            int_of_size,
        ],
        ids=lambda f: f.__name__,
    )
    def test_suggested_fix_works(self, fn):
        """Doing what the no-example error suggests (examples plus the named flag) makes the trace succeed."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(fn)
        message = str(caught.value)
        suggested = re.search(r"policy=Policy\((\w+)=True\)", message)
        assert suggested, message
        example = torch.randn(6)
        gm = specfx.trace(fn, (example,), policy=Policy(**{suggested.group(1): True}))
        torch.testing.assert_close(gm(example), fn(example))

    def test_no_empty_fx_message(self):
        """A no-example error never shows an empty pair of parentheses where FX's message would go."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(int_of_size)
        assert "none ()" not in str(caught.value) and "so it has none." in str(caught.value)
