"""Input and output structure: graphs take containers as the model did, return eager's
output types (transformers ModelOutputs, OrderedDict, namedtuples, dataclasses, registered
pytree nodes), and check every input's structure and leaf kinds at entry."""

import collections
import copy
import dataclasses
import enum
import os
from typing import Any, NamedTuple

import pytest
import torch
import torch.fx
import torch.utils._pytree as pytree
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import specfx
from specfx import GuardError, Policy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def same(expected: Any, actual: Any) -> None:
    """Equal structure (container types included) and equal leaves."""
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    assert actual_spec == expected_spec
    for want, got in zip(expected_leaves, actual_leaves):
        if isinstance(want, torch.Tensor):
            assert torch.equal(got, want)
        else:
            assert type(got) is type(want) and got == want


# -- transformers ModelOutputs -----------------------------------------------------------------


def ids(batch: int, length: int, pad: int = 0) -> dict:
    input_ids = torch.randint(0, 100, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        mask[0, length - pad:] = 0
    return {"input_ids": input_ids, "attention_mask": mask}


def distilbert() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                           max_position_embeddings=64)
    return transformers.DistilBertModel(config).eval()


def qwen2_moe() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen2MoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return transformers.Qwen2MoeModel(config).eval()


def vit() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return transformers.ViTModel(config, add_pooling_layer=True).eval()


MODELS = {
    "encoder": (distilbert, lambda: ((), ids(2, 8, pad=3)), lambda: ((), ids(3, 5, pad=1)), Policy(bool=True)),
    "decoder": (qwen2_moe, lambda: ((ids(2, 8)["input_ids"],), {}), lambda: ((ids(3, 6)["input_ids"],), {}),
                Policy(iter=True, bool=True, scalars=True)),
    "vision": (vit, lambda: ((torch.randn(2, 3, 32, 32),), {}), lambda: ((torch.randn(3, 3, 32, 32),), {}),
               Policy(bool=True)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def traced(request):
    build, example, other, policy = MODELS[request.param]
    model = build()
    args, kwargs = example()
    other_args, other_kwargs = other()
    check = [other_kwargs] if not other_args else [other_args]
    gm = specfx.trace(model, args, kwargs, policy=policy, check_inputs=check)
    return model, gm, (other_args, other_kwargs)


class TestModelOutputs:
    def test_same_type_and_values_as_eager(self, traced):
        """The graph returns the ModelOutput subclass eager returns, with the same fields and values."""
        model, gm, (args, kwargs) = traced
        expected, actual = model(*args, **kwargs), gm(*args, **kwargs)
        assert type(actual) is type(expected)
        assert list(actual.keys()) == list(expected.keys())
        same(expected, actual)

    def test_attribute_key_index_and_to_tuple(self, traced):
        """The ways users read outputs all work: attribute, key, index, to_tuple()."""
        model, gm, (args, kwargs) = traced
        expected, actual = model(*args, **kwargs), gm(*args, **kwargs)
        assert torch.equal(actual.last_hidden_state, expected.last_hidden_state)
        assert torch.equal(actual["last_hidden_state"], expected["last_hidden_state"])
        assert torch.equal(actual[0], expected[0])
        assert len(actual.to_tuple()) == len(expected.to_tuple())

    def test_code_rebuilds_from_the_spec(self, traced):
        """gm.code stays readable: one entry line, one rebuild at the end."""
        _, gm, _ = traced
        assert gm.code.count("specfx_flatten_inputs(") == 1
        assert gm.code.count("specfx_rebuild_outputs(") == 1

    def test_deepcopy_keeps_types_and_records(self, traced):
        """copy.deepcopy keeps the output type, the records and the entry check."""
        model, gm, (args, kwargs) = traced
        clone = copy.deepcopy(gm)
        same(model(*args, **kwargs), clone(*args, **kwargs))
        assert clone.specializations == gm.specializations

    def test_retrace_reproduces_the_graph(self, traced):
        """specfx.trace(gm) without examples reproduces the same code (buffers sliced by symbolic
        sizes stay reads, the entry check and output spec are restored)."""
        model, gm, (args, kwargs) = traced
        again = specfx.trace(gm)
        assert again.code.splitlines()[:5] == gm.code.splitlines()[:5]  # signature and entry check
        assert again.code.count("specfx_rebuild_outputs(") == 1
        same(model(*args, **kwargs), again(*args, **kwargs))
        assert again.code.count("specfx_guard_") == gm.code.count("specfx_guard_")
        same(model(*args, **kwargs), again(*args, **kwargs))


# -- user containers ---------------------------------------------------------------------------


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


@dataclasses.dataclass
class Result:
    value: torch.Tensor
    extra: torch.Tensor


class Registered:
    """A container type the user registers with torch's pytree."""

    def __init__(self, scale: torch.Tensor, shift: torch.Tensor) -> None:
        self.scale, self.shift = scale, shift


pytree.register_pytree_node(
    Registered,
    lambda r: ([r.scale, r.shift], None),
    lambda leaves, _: Registered(*leaves),
    serialized_type_name="tests.test_structure.Registered",
)


def containers_out(x: torch.Tensor) -> Any:
    return {
        "ordered": collections.OrderedDict(b=x + 1, a=x * 2),
        "pair": Pair(x.sin(), x.cos()),
        "result": Result(x - 1, x.abs()),
        "registered": Registered(x * 3, x + 3),
        "nested": [(x, None), {"k": [x.exp()]}],
    }


class TestUserContainers:
    def test_every_container_type_is_returned_as_eager_returns_it(self):
        """OrderedDict, namedtuple, dataclass, a registered node, nested lists/tuples/dicts."""
        gm = specfx.trace(containers_out, torch.randn(3))
        x = torch.randn(5)
        expected, actual = containers_out(x), gm(x)
        assert type(actual["ordered"]) is collections.OrderedDict and list(actual["ordered"]) == ["b", "a"]
        assert type(actual["pair"]) is Pair and torch.equal(actual["pair"].second, expected["pair"].second)
        assert type(actual["result"]) is Result and torch.equal(actual["result"].extra, expected["result"].extra)
        assert type(actual["registered"]) is Registered
        assert torch.equal(actual["registered"].shift, expected["registered"].shift)
        same(expected["nested"], actual["nested"])
        assert type(actual["nested"][0]) is tuple

    def test_registered_container_as_input(self):
        """A registered pytree type given as an input is flattened and checked at entry."""

        def f(x, affine):
            return x * affine.scale + affine.shift

        affine = Registered(torch.full((3,), 2.0), torch.ones(3))
        gm = specfx.trace(f, (torch.randn(3), affine))
        x = torch.randn(3)
        assert torch.equal(gm(x, affine), f(x, affine))
        with pytest.raises(GuardError, match=r"affine is a tuple, traced as a Registered"):
            gm(x, (affine.scale, affine.shift))

    def test_containers_as_inputs_positional_and_keyword(self):
        """Dict, list and tuple inputs are accepted the way they were traced, positionally or by name."""

        def f(batch, pairs, scale=1.0):
            return batch["x"] * scale + sum(a * b for a, b in pairs)

        batch, pairs = {"x": torch.ones(2)}, [(torch.ones(2), torch.full((2,), 3.0))]
        gm = specfx.trace(f, (batch, pairs), {"scale": 2.0})
        assert torch.equal(gm(batch, pairs, scale=2.5), f(batch, pairs, scale=2.5))
        assert torch.equal(gm(pairs=pairs, batch=batch, scale=0.5), f(batch, pairs, scale=0.5))


@dataclasses.dataclass
class Shaped:
    hidden: torch.Tensor
    spatial: Any


def sizes_out(x: torch.Tensor) -> Any:
    """Sizes in every kind of output position: returned bare, in a tuple, a dict, a list, a
    dataclass; whole, sliced, and extended with a tuple (still a torch.Size in eager)."""
    y = x * 2
    return (x.shape, {"rows": x.size()[:1], "grown": [x.shape[1:] + (4,)]},
            Shaped(y, y.shape[-2:]), y)


class TestSizes:
    @pytest.mark.parametrize("policy", [None, specfx.Specialize.ALL], ids=["sizes-traced", "sizes-baked"])
    def test_a_size_comes_back_as_a_size(self, policy):
        """A ``torch.Size`` in the output is a ``torch.Size`` from the graph, whether the sizes
        are computed when the graph runs or baked in (torch's pytree rebuilds a Size as a
        tuple), and stays one after pickling and deepcopy."""
        import io

        gm = specfx.trace(sizes_out, torch.randn(2, 3), policy=policy)
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        x = torch.randn(2, 3)
        expected = sizes_out(x)
        for graph in (gm, loaded, copy.deepcopy(gm)):
            actual = graph(x)
            same(expected[:2], actual[:2])
            assert type(actual[0]) is torch.Size and actual[0].numel() == 6
            assert type(actual[1]["grown"][0]) is torch.Size and actual[1]["grown"][0] == (3, 4)
            assert type(actual[2]) is Shaped and torch.equal(actual[2].hidden, expected[2].hidden)
            assert type(actual[2].spatial) is torch.Size and actual[2].spatial == (2, 3)
            assert torch.equal(actual[3], expected[3])

    def test_a_size_given_as_an_input_survives_pickling(self):
        """A ``torch.Size`` input is checked at entry, and the graph reloads (its code is
        re-traced with the Size's sizes as proxies, which no Size can hold)."""
        import io

        def f(x, size):
            return x.reshape(size) + 1

        gm = specfx.trace(f, (torch.randn(6), torch.Size([2, 3])))
        buffer = io.BytesIO()
        torch.save(gm, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        x = torch.randn(6)
        for graph in (gm, loaded):
            assert torch.equal(graph(x, torch.Size([3, 2])), f(x, torch.Size([3, 2])))
            with pytest.raises(GuardError, match=r"size is a list, traced as a Size"):
                graph(x, [3, 2])


# -- entry checks ------------------------------------------------------------------------------


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


def configured(x, mask=None, n: int = 2, mode=Mode.FAST, flag=True, name="a", options=(1.0,)):
    y = x * n if mode is Mode.FAST else x
    if flag is True and name == "a":
        y = y + options[0]
    return y if mask is None else y * mask


@pytest.fixture(scope="module")
def gm():
    return specfx.trace(configured, (torch.ones(2), torch.ones(2)), {"options": [1.0]})


class TestEntryChecks:
    def test_answers_equal_eager_on_the_traced_values(self, gm):
        """Identity tests on Python inputs (`mode is Mode.FAST`, `flag is True`) answer as in eager."""
        x, mask = torch.randn(2), torch.randn(2)
        assert torch.equal(gm(x, mask, options=[1.0]), configured(x, mask, options=[1.0]))

    @pytest.mark.parametrize(("call", "message"), [
        (lambda gm: gm(None, torch.ones(2), options=[1.0]), r"x is None, traced as a Tensor"),
        (lambda gm: gm([1, 2], torch.ones(2), options=[1.0]), r"x is a list \(\[1, 2\]\), traced as a Tensor"),
        (lambda gm: gm(torch.ones(2), None, options=[1.0]), r"mask is None, traced as a Tensor"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), 2.0, options=[1.0]), r"n is a float \(2.0\), traced as an int"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), mode=Mode.SLOW, options=[1.0]), r"mode == .*Mode.FAST"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), flag=1, options=[1.0]), r"flag is an int \(1\), traced as a bool"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), flag=False, options=[1.0]), r"flag == True"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), name="b", options=[1.0]), r"name == 'a'"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), options=(1.0,)), r"options is a tuple, traced as a list"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), options=[1.0, 2.0]), r"options has 2 elements, traced with 1"),
        (lambda gm: gm(torch.ones(2), torch.ones(2), options=[1]), r"options\[0\] is an int \(1\), traced as a float"),
    ], ids=["none-for-tensor", "list-for-tensor", "none-mask", "float-for-int", "enum", "int-for-bool", "bool", "str",
            "tuple-for-list", "length", "nested-leaf-kind"])
    def test_wrong_input_names_the_input(self, gm, call, message):
        """A wrong structure, leaf kind or Python value raises GuardError naming the input, before any compute."""
        with pytest.raises(GuardError, match=message):
            call(gm)

    def test_python_values_are_recorded(self, gm):
        """The Python values used as themselves are listed in explain()."""
        descriptions = [s.guard_description for s in gm.specializations]
        assert "mode == <Mode.FAST: 'fast'>" in descriptions and "flag == True" in descriptions
        assert "name == 'a'" in descriptions

    def test_kwargs_keys(self):
        """`**kwargs` keys are part of the structure: other names fail at entry."""

        def f(x, **extra):
            return x * extra["scale"]

        gm = specfx.trace(f, (torch.ones(2),), {"scale": torch.full((2,), 2.0)})
        assert torch.equal(gm(torch.ones(2), scale=torch.ones(2)), torch.ones(2))
        with pytest.raises(GuardError, match=r"extra has keys \('shift',\), traced with keys \('scale',\)"):
            gm(torch.ones(2), shift=torch.ones(2))

    def test_unguarded_graph_has_no_kind_checks(self):
        """guards=False flattens without checking kinds (the documented unsafety)."""
        gm = specfx.trace(lambda x, n: x * n, (torch.ones(2), 2), guards=False)
        assert torch.equal(gm(torch.ones(2), 2.5), torch.full((2,), 2.5))


# -- property: any nested structure of tensors round-trips -----------------------------------

leaves = st.integers(1, 3).map(lambda n: torch.randn(n))
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3),
        st.lists(children, min_size=1, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("abc"), children, min_size=1, max_size=3),
        st.dictionaries(st.sampled_from("abc"), children, min_size=1, max_size=3).map(collections.OrderedDict),
    ),
    max_leaves=6,
)


def double(tree):
    return pytree.tree_map(lambda t: t * 2, tree)


class TestAnyStructure:
    @settings(max_examples=25, deadline=None)
    @given(trees)
    def test_structure_round_trips_and_changes_are_caught(self, tree):
        """Any nested structure in equals eager out; the same structure with new values passes, and a
        container of another type at the top fails at entry."""
        gm = specfx.trace(double, (tree,))
        fresh = pytree.tree_map(lambda t: torch.randn_like(t), tree)
        same(double(fresh), gm(fresh))
        if isinstance(tree, (list, tuple)):
            with pytest.raises(GuardError, match="traced as a"):
                gm(list(tree) if isinstance(tree, tuple) else tuple(tree))


# -- re-tracing by other tracers and the Specializer ------------------------------------------


class TestRetrace:
    def test_symbolic_trace_keeps_entry_check_and_output_types(self):
        """A foreign tracer records the entry check and the rebuild as nodes: both still run."""

        def f(batch):
            return collections.OrderedDict(y=batch["x"].relu())

        gm = specfx.trace(f, ({"x": torch.randn(3)},))
        again = torch.fx.symbolic_trace(gm)
        out = again({"x": torch.randn(3)})
        assert type(out) is collections.OrderedDict
        with pytest.raises(GuardError, match="batch has keys"):
            again({"z": torch.randn(3)})

    def test_specializer_with_container_inputs(self):
        """The Specializer's prologues take the inputs as the variants do."""

        def f(batch):
            return batch["x"] * 2 if batch["x"].sum() > 0 else batch["x"]

        spec = specfx.Specializer(f, Policy(bool=True))
        for sign in (1.0, -1.0, 1.0, -1.0):
            batch = {"x": torch.full((2,), sign)}
            assert torch.equal(spec(batch), f(batch))
        assert len(spec.variants) == 2


# -- the CLI on a transformers factory ---------------------------------------------------------


def tiny_distilbert() -> nn.Module:
    """A factory for `specfx trace tests.test_structure:tiny_distilbert ...`."""
    return distilbert()


def test_cli_check_on_a_transformers_factory(capsys):
    """`specfx trace ... --check N` passes on a transformers model: outputs compare with their types."""
    from specfx.cli import main

    code = main(["trace", "tests.test_structure:tiny_distilbert", "--kwarg", "input_ids=randint(0, 100, (2, 8))",
                 "--kwarg", "attention_mask=ones(2, 8, dtype=int64)", "--policy", "bool", "--check", "2"])
    assert code == 0, capsys.readouterr().err
    assert "2 check input(s) agree with eager" in capsys.readouterr().err
