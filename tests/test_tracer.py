"""The tracer: each flag's allowed path, its guard, and its refusal."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import specfx
from specfx._trace.options import ENTRY_CHECKS  # the input type check at graph entry
from specfx import GuardError, Policy, SpecializationError, Specialize, specialize

from .models import Branchy, Flatten, Loop, Optional, Scalars, SplitCat, line_of


def kinds(gm):
    return [s.kind for s in gm.specializations]


class TestIterLen:
    def test_seed_example_traces_and_generalizes(self):
        """The seed traces under ITER_LEN and works for other batch/spatial sizes."""
        gm = specfx.trace(SplitCat(), (torch.randn(1, 4, 10, 10),), policy=Policy(Specialize.ITER_LEN))
        for shape in [(1, 4, 10, 10), (3, 4, 5, 7), (2, 3, 1, 1)]:
            x = torch.randn(shape)
            assert torch.equal(gm(x), SplitCat()(x))
        assert kinds(gm) == ["iter"]
        assert "_tensor_constant" not in gm.code

    def test_seed_graph_is_split_getitems_cat(self):
        """The seed graph is split -> guard -> getitem x2 -> cat, nothing baked; the output
        passes through specfx.guarded (it depends on the guard)."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 10, 10), policy=Policy(iter=True))
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target not in ENTRY_CHECKS]
        assert targets == [torch.functional.split, specfx.guard_len, __import__("operator").getitem,
                           __import__("operator").getitem, torch.cat, specfx.guarded]

    def test_seed_guard_points_at_the_star_call(self):
        """Six channels make three chunks: GuardError names the `*x` line."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 10, 10), policy=Policy(iter=True))
        with pytest.raises(GuardError) as caught:
            gm(torch.randn(1, 6, 10, 10))
        line = line_of(SplitCat.forward, "self.call_cat(*x)")
        assert f"models.py:{line}: return self.call_cat(*x)" in str(caught.value)
        assert (caught.value.expected, caught.value.actual) == (2, 3)

    def test_seed_without_policy_names_flag_and_line(self):
        """Without ITER_LEN the refusal names the flag, the decorator and the line."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(SplitCat(), torch.randn(1, 4, 10, 10))
        message = str(caught.value)
        assert "Specialize.ITER_LEN" in message
        assert "Policy(iter=True)" in message
        assert "@specialize(iter=True)" in message and "SplitCat.forward" in message
        assert f"models.py:{line_of(SplitCat.forward, 'call_cat(*x)')}: return self.call_cat(*x)" in message
        assert caught.value.flag is Specialize.ITER_LEN and caught.value.value == 2

    def test_len_is_guarded_and_used_as_int(self):
        """len() of a split returns an int and guards the length."""

        def f(x):
            parts = torch.split(x, 3)
            return x * len(parts)

        gm = specfx.trace(f, torch.randn(9), policy=Policy(iter=True))
        assert torch.equal(gm(torch.ones(7)), torch.ones(7) * 3)
        with pytest.raises(GuardError):
            gm(torch.ones(12))

    def test_for_loop_over_unbind(self):
        """A for-loop over rows unrolls, with one length guard."""
        gm = specfx.trace(Loop(), torch.randn(3, 5), policy=Policy(iter=True))
        x = torch.randn(3, 2)
        torch.testing.assert_close(gm(x), Loop()(x))
        with pytest.raises(GuardError):
            gm(torch.randn(4, 2))

    def test_unpacking_needs_no_flag_but_is_guarded(self):
        """`a, b = t` is fixed by the code: allowed without ITER_LEN and guarded."""

        def f(x):
            a, b = torch.chunk(x, 2)
            return a - b

        gm = specfx.trace(f, torch.arange(4.0))
        assert kinds(gm) == ["unpack"] and gm.specializations[0].flag is Specialize.NONE
        assert torch.equal(gm(torch.arange(6.0)), f(torch.arange(6.0)))
        with pytest.raises(GuardError):
            gm(torch.ones(1))

    def test_star_unpacking_of_rest_needs_iter(self):
        """`a, *rest = t` needs the length, so ITER_LEN."""

        def f(x):
            a, *rest = torch.split(x, 1)
            return a + rest[-1]

        with pytest.raises(SpecializationError, match="ITER_LEN"):
            specfx.trace(f, torch.randn(3))
        gm = specfx.trace(f, torch.randn(3), policy="iter")
        assert torch.equal(gm(torch.arange(3.0)), f(torch.arange(3.0)))

    def test_leaf_module_output_can_be_unpacked(self):
        """A leaf LSTM's nested output tuple unpacks, with guards per level."""
        lstm = nn.LSTM(4, 3, batch_first=True)

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = lstm

            def forward(self, x):
                out, (h, c) = self.lstm(x)
                return out.sum() + h.sum() + c.sum()

        gm = specfx.trace(M(), torch.randn(2, 5, 4))
        assert any(n.op == "call_module" for n in gm.graph.nodes)
        x = torch.randn(3, 2, 4)
        torch.testing.assert_close(gm(x), M()(x))

    def test_wrapped_function_output_iterates(self):
        """The tuple returned by a torch.fx.wrap'ed function iterates under ITER_LEN."""
        gm = specfx.trace(_uses_wrapped_pair, torch.randn(3), policy=Policy(iter=True))
        assert any(n.target is _wrapped_pair for n in gm.graph.nodes)
        x = torch.randn(3)
        torch.testing.assert_close(gm(x), _uses_wrapped_pair(x))

    def test_dict_input_iterates_over_keys(self):
        """Iterating a dict input yields its keys as constants, guarded."""

        def f(batch):
            return sum(v * i for i, (k, v) in enumerate(batch.items()))

        batch = {"a": torch.ones(2), "b": torch.ones(2)}
        gm = specfx.trace(f, (batch,), policy=Policy(iter=True))
        assert torch.equal(gm(batch), f(batch))
        with pytest.raises(GuardError, match=r"batch has keys \(.a., .c.\), traced with keys"):
            gm({"a": torch.ones(2), "c": torch.ones(2)})


@torch.fx.wrap
def _wrapped_pair(x):
    return x + 1, x * 2


def _uses_wrapped_pair(x):
    total = 0
    for part in _wrapped_pair(x):
        total = total + part
    return total


class TestBool:
    def test_shape_predicate_stays_symbolic(self):
        """BOOL alone guards `x.shape[0] > 1`, not the shape: any batch > 1 works."""
        model = Branchy().eval()
        gm = specfx.trace(model, torch.randn(2, 4).abs() + 1, policy=Policy(bool=True))
        for batch in (2, 3, 7):
            x = torch.randn(batch, 4).abs() + 1
            x = x if model(x).sum() > 0 else -x
            if (model.lin(x - x.mean(0, keepdim=True))).sum() > 0:
                torch.testing.assert_close(gm(x), model(x))
        with pytest.raises(GuardError, match=r"bool\(x.shape\[0\] > 1\) == True"):
            gm(torch.randn(1, 4))

    def test_refusal_names_bool(self):
        """Without BOOL the refusal points at the `if` line."""
        with pytest.raises(SpecializationError) as caught:
            specfx.trace(Branchy(), torch.randn(2, 4))
        assert f"models.py:{line_of(Branchy.forward, 'x.shape[0] > 1')}" in str(caught.value)
        assert "Policy(bool=True)" in str(caught.value)

    @pytest.mark.parametrize("form", ["and", "or", "not", "assert", "while"])
    def test_every_truth_context_is_bool(self, form):
        """and/or/not/assert/while all go through BOOL."""
        sources = {
            "and": "def f(x):\n    return x + 1 if (x.sum() > 0 and x.max() < 9) else x\n",
            "or": "def f(x):\n    return x + 1 if (x.sum() > 0 or x.max() > 9) else x\n",
            "not": "def f(x):\n    return x + 1 if not (x.sum() < 0) else x\n",
            "assert": "def f(x):\n    assert x.sum() > 0\n    return x + 1\n",
            "while": "def f(x):\n    while x.sum() < 10:\n        x = x * 2\n    return x\n",
        }
        namespace = {"torch": torch}
        exec(compile(sources[form], f"<{form}>", "exec"), namespace)
        f = namespace["f"]
        with pytest.raises(SpecializationError, match="BOOL"):
            specfx.trace(f, torch.ones(3))
        gm = specfx.trace(f, torch.ones(3), policy=Policy(bool=True))
        assert torch.equal(gm(torch.ones(3)), f(torch.ones(3)))

    def test_contains_is_a_guarded_bool(self):
        """`k in d` on a traced dict is recorded as operator.contains and guarded."""

        def f(inputs):
            return inputs["x"] * 2 if "y" in inputs else inputs["x"]

        gm = specfx.trace(f, ({"x": torch.ones(2)},), policy=Policy(bool=True))
        assert torch.equal(gm({"x": torch.ones(2)}), torch.ones(2))
        with pytest.raises(GuardError):
            gm({"x": torch.ones(2), "y": torch.ones(2)})


class TestShapes:
    def test_shapes_become_ints_with_guards(self):
        """Under SHAPES, size(0) and shape[1] are ints, guarded per dimension read."""
        gm = specfx.trace(Flatten(), torch.randn(2, 3, 4), policy=Policy(shapes=True))
        # x.shape[1] reads one dimension, so only that one is guarded (as x.size(1) would be)
        assert [s.guard_description for s in gm.specializations] == ["x.size(0) == 2", "x.size(1) == 3"]
        assert "view(2, -1)" in gm.code
        assert torch.equal(gm(torch.ones(2, 3, 7)), Flatten()(torch.ones(2, 3, 7)))
        x = torch.randn(2, 3, 4)
        assert torch.equal(gm(x), Flatten()(x))
        with pytest.raises(GuardError):
            gm(torch.randn(3, 3, 4))

    def test_without_shapes_sizes_stay_symbolic(self):
        """Without SHAPES, x.size(0) is a node and the graph fits every batch."""
        gm = specfx.trace(Flatten(), torch.randn(2, 3, 4))
        assert gm.specializations == []
        for shape in [(5, 3, 4), (1, 2, 2)]:
            x = torch.randn(shape)
            assert torch.equal(gm(x), Flatten()(x))

    def test_dim_ndim_numel(self):
        """dim()/ndim/numel() are SHAPES and guard only what they read."""

        def f(x):
            return x.reshape(-1) * (x.dim() + x.ndim + x.numel())

        gm = specfx.trace(f, torch.randn(2, 3), policy=Policy(shapes=True))
        assert sorted(kinds(gm)) == ["ndim", "numel"]
        assert torch.equal(gm(torch.ones(3, 2)), f(torch.ones(3, 2)))
        with pytest.raises(GuardError):
            gm(torch.ones(2, 2))

    def test_int_of_a_shape_expression_needs_shapes_not_scalars(self):
        """int(x.size(1) // 2) is a shape decision (SHAPES), not SCALARS."""

        def f(x):
            return x[:, : int(x.size(1) // 2)]

        with pytest.raises(SpecializationError, match="SHAPES"):
            specfx.trace(f, torch.randn(2, 6))
        gm = specfx.trace(f, torch.randn(2, 6), policy=Policy(shapes=True))
        assert torch.equal(gm(torch.ones(4, 6)), f(torch.ones(4, 6)))

    def test_range_over_size_needs_shapes(self):
        """range(x.size(0)) indexes a shape: SHAPES, guarded."""

        def f(x):
            return sum(x[i] for i in range(x.size(0)))

        with pytest.raises(SpecializationError, match=r"operator.index\(\) of `x.size\(0\)`.*SHAPES"):
            specfx.trace(f, torch.randn(3, 2))
        gm = specfx.trace(f, torch.randn(3, 2), policy=Policy(shapes=True))
        assert [s.kind for s in gm.specializations] == ["size"]
        torch.testing.assert_close(gm(torch.ones(3, 2)), f(torch.ones(3, 2)))
        with pytest.raises(GuardError):
            gm(torch.ones(4, 2))

    def test_param_shapes_constant(self):
        """param_shapes_constant reads parameter shapes as ints without SHAPES."""

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(3, 4))

            def forward(self, x):
                return x.view(-1, self.weight.shape[1]) @ self.weight.t()

        symbolic = specfx.trace(M(), torch.randn(2, 4))
        assert "view(-1, getitem)" in symbolic.code and symbolic.specializations == []
        model = M()
        gm = specfx.trace(model, torch.randn(2, 4), policy=Policy(param_shapes_constant=True))
        assert "view(-1, 4)" in gm.code
        assert [(s.kind, s.flag, s.expression) for s in gm.specializations] == [
            ("size", Specialize.NONE, "self.weight.size(1)")
        ]
        x = torch.randn(5, 4)
        torch.testing.assert_close(gm(x), model(x))


class TestScalars:
    def test_int_and_item_are_baked_and_guarded(self):
        """int() and .item() under SCALARS bake values and guard them."""
        gm = specfx.trace(Scalars(), torch.ones(3), policy=Policy(scalars=True))
        assert kinds(gm) == ["int", "item"]
        out, top = gm(torch.ones(3))
        assert torch.equal(out, torch.ones(3) * 3) and top == 1.0
        with pytest.raises(GuardError):
            gm(torch.ones(4))

    def test_item_without_scalars_stays_a_node(self):
        """Without SCALARS, .item() is an ordinary node; int() of it is refused."""

        def f(x):
            return torch.full((2,), x.max().item())

        gm = specfx.trace(f, torch.ones(3))
        assert gm.specializations == []
        assert torch.equal(gm(torch.tensor([5.0])), torch.full((2,), 5.0))
        with pytest.raises(SpecializationError, match="SCALARS"):
            specfx.trace(Scalars(), torch.ones(3))

    def test_tolist(self):
        """.tolist() under SCALARS returns the Python list and guards it."""

        def f(x, idx):
            return x[idx.tolist()]

        gm = specfx.trace(f, (torch.arange(5.0), torch.tensor([0, 2])), policy=Policy(scalars=True))
        assert torch.equal(gm(torch.arange(5.0) * 2, torch.tensor([0, 2])), torch.tensor([0.0, 4.0]))
        with pytest.raises(GuardError):
            gm(torch.arange(5.0), torch.tensor([1, 2]))


class TestIdentity:
    def test_none_example_is_passed_as_none(self):
        """A None example reaches the code as None and is guarded."""
        gm = specfx.trace(Optional(), (torch.ones(2),), {"mask": None})
        assert torch.equal(gm(torch.ones(2)), torch.ones(2) + 1)
        with pytest.raises(GuardError, match="mask is None"):
            gm(torch.ones(2), mask=torch.zeros(2))

    def test_default_none_parameter_is_none(self):
        """A parameter left at its default None is None while tracing."""
        gm = specfx.trace(Optional(), torch.ones(2))
        assert kinds(gm) == ["is_none"]
        assert torch.equal(gm(torch.full((2,), 3.0)), torch.full((2,), 4.0))

    def test_tensor_example_takes_the_mask_path(self):
        """A tensor mask example takes the `is not None` path."""
        gm = specfx.trace(Optional(), (torch.ones(2), torch.zeros(2)))
        assert torch.equal(gm(torch.ones(2), torch.zeros(2)), torch.ones(2))

    def test_isinstance_answers_as_the_value(self):
        """isinstance(x, torch.Tensor) is True for a tensor input, and guarded."""

        def f(x):
            return x + 1 if isinstance(x, torch.Tensor) else x

        gm = specfx.trace(f, torch.ones(2))
        assert "add" in gm.code and kinds(gm) == ["type"]

    def test_getitem_none_element(self):
        """An element that is None (from a tuple input) is None in the code."""

        def f(pair):
            x, extra = pair
            return x if extra is None else x + extra

        gm = specfx.trace(f, ((torch.ones(2), None),))
        assert torch.equal(gm((torch.ones(2), None)), torch.ones(2))
        with pytest.raises(GuardError):
            gm((torch.ones(2), torch.ones(2)))


    @pytest.mark.parametrize("reads_weights", [False, True])
    def test_a_none_the_unpacking_discards_decides_nothing(self, reads_weights):
        """`out, _ = attention(...)`: the None weights, never read, get no node and no guard
        (graph passes would take the guard for a use of them); read, they stay guarded."""

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

            def forward(self, x):
                if reads_weights:
                    out, weights = self.attention(x, x, x, need_weights=False)
                    return out if weights is None else out + weights.mean()
                out, _ = self.attention(x, x, x, need_weights=False)
                return out

        model, x = Block().eval(), torch.randn(2, 5, 8)
        gm = specfx.trace(model, x)
        assert ("is_none" in kinds(gm)) is reads_weights
        assert ("getitem_1" in gm.code) is reads_weights
        assert kinds(gm).count("unpack") == 1
        assert torch.equal(gm(x * 2), model(x * 2))


class TestTypes:
    def test_dtype_and_device_are_guarded_values(self):
        """x.dtype / x.device / is_floating_point() are values (torch.finfo works) and guarded;
        a dtype or device passed straight to an op (torch.zeros(..., device=x.device)) is read
        when the graph runs instead, and decides nothing."""

        def f(x):
            eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0
            return torch.zeros(x.shape, dtype=x.dtype, device=x.device) + eps

        gm = specfx.trace(f, torch.ones(2))
        assert sorted(s.kind for s in gm.specializations) == ["dtype"]
        assert torch.equal(gm(torch.ones(3)), f(torch.ones(3)))
        with pytest.raises(GuardError, match=r"x.dtype == torch.float32, but for this input x.dtype == torch.float64"):
            gm(torch.ones(2, dtype=torch.float64))

    def test_buffers_carry_values_with_examples(self):
        """With examples a buffer sliced by a traced length stays symbolic (torch.fx cannot trace it)."""

        class Positions(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("ids", torch.arange(32).view(1, 32))

            def forward(self, x):
                return x + self.ids[:, : x.shape[1]]

        with pytest.raises(TypeError):
            torch.fx.symbolic_trace(Positions())
        gm = specfx.trace(Positions(), torch.zeros(2, 8))
        assert gm.specializations == []
        assert torch.equal(gm(torch.zeros(1, 5)), torch.arange(5.0).view(1, 5))

    def test_assigning_attributes_leaves_the_model_unchanged(self):
        """`self.count = self.count + 1` and `self.cache = x` in forward do not stick to the model; the
        graph binds them on itself on every call, as eager does on the model."""

        class Stateful(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("count", torch.zeros(()))

            def forward(self, x):
                self.count = self.count + 1
                self.cache = x
                return x * self.count

        model = Stateful()
        buffer = model.count
        gm = specfx.trace(model, torch.ones(2))
        assert model.count is buffer and torch.equal(buffer, torch.zeros(())) and "cache" not in vars(model)
        assert not any(name.startswith("_tensor_constant") for name in vars(model))
        x = torch.ones(2)
        assert torch.equal(gm(x), torch.ones(2)) and torch.equal(gm(x), torch.full((2,), 2.0))
        assert torch.equal(gm.count, torch.full((), 2.0)) and gm.cache is x  # (tests/test_model_writes.py)


class TestBufferUpdates:
    def test_in_place_buffer_update_runs_in_the_graph(self):
        """`self.steps += 1` on a buffer is an in-place node: the graph keeps counting, as eager does."""

        class Counter(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("steps", torch.zeros((), dtype=torch.long))

            def forward(self, x):
                self.steps += 1
                return x * self.steps

        model = Counter()
        gm = specfx.trace(model, torch.ones(2))
        assert model.steps.item() == 0
        assert "+=" in gm.code
        assert [gm(torch.ones(2))[0].item() for _ in range(3)] == [1.0, 2.0, 3.0]


class TestSetItemAndMath:
    def test_setitem_is_recorded(self):
        """x[idx] = v on a traced tensor becomes an operator.setitem node."""

        def f(x):
            y = x.clone()
            y[0] = 0
            return y

        gm = specfx.trace(f, torch.ones(3))
        assert torch.equal(gm(torch.full((3,), 2.0)), torch.tensor([0.0, 2.0, 2.0]))

    def test_math_is_autowrapped(self):
        """math.sqrt of a shape stays a node (autowrap), as in torch.fx."""

        def f(x):
            return x / math.sqrt(x.size(-1))

        gm = specfx.trace(f, torch.ones(2, 4))
        torch.testing.assert_close(gm(torch.ones(2, 9)), torch.ones(2, 9) / 3)


class TestMeta:
    def test_meta_inputs_trace_shapes(self):
        """Meta example inputs: shape predicates work, no data is needed."""

        def f(x):
            return x.view(x.size(0), -1) if x.shape[1] > 2 else x

        gm = specfx.trace(f, torch.empty(3, 4, 5, device="meta"), policy=Policy(bool=True))
        assert gm(torch.ones(2, 4, 5)).shape == (2, 20)

    def test_meta_data_decision_explains(self):
        """A data-dependent decision on meta inputs says why it cannot be made."""

        def f(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError, match="meta device"):
            specfx.trace(f, torch.empty(3, device="meta"), policy=Policy(bool=True))


class TestScopes:
    def test_scope_policy_applies_inside_matching_submodule(self):
        """scopes= grants a flag inside matching submodules only."""

        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = SplitCat()

            def forward(self, x):
                return self.inner(x)

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(Outer(), torch.randn(1, 4, 2, 2))
        assert "scopes={'inner': Policy(iter=True)}" in str(caught.value)
        gm = specfx.trace(Outer(), torch.randn(1, 4, 2, 2), policy=Policy(scopes={"inner": Policy(iter=True)}))
        assert gm.specializations[0].module == "inner"

    def test_annotation_forbids_inside(self):
        """@specialize(bool=False) wins over the trace policy inside its scope."""

        @specialize(bool=False)
        def strict(x):
            return x if x.sum() > 0 else -x

        with pytest.raises(SpecializationError, match=r"forbidden here by @specialize\(bool=False\)"):
            specfx.trace(strict, torch.ones(2), policy=Policy(bool=True))

    def test_unmatched_scope_pattern_warns(self):
        """A scopes pattern matching no submodule warns with examples of real names."""
        with pytest.warns(UserWarning, match="matches no submodule"):
            specfx.trace(Branchy(), torch.ones(2, 4), policy=Policy(bool=True, scopes={"nope.*": Policy()}))


class _Box:
    """An opaque object holding a traced value, lowered by __fx_create_arg__."""

    def __init__(self, x):
        self.x = x

    def __fx_create_arg__(self, tracer):
        return tracer.create_node("call_function", _Box, (tracer.create_arg(self.x),), {})


class _UnboxLeaf(nn.Module):
    def forward(self, box):
        return sum(v for v in box.x)


class TestOpaqueValues:
    def test_proxy_hidden_in_an_object_gets_no_value(self):
        """A leaf fed an object hiding a proxy is recorded, not run on the proxy (as in torch.fx)."""

        class Root(nn.Module):
            def __init__(self):
                super().__init__()
                self.leaf = _UnboxLeaf()

            def forward(self, x):
                return self.leaf(_Box(x)) * 2

        gm = specfx.trace(Root(), torch.ones(2), leaf_modules=[_UnboxLeaf])
        assert [n.op for n in gm.graph.nodes if n.target not in ENTRY_CHECKS] == [
            "placeholder", "call_function", "call_module", "call_function", "output"]
        assert "tensor_meta" not in next(n for n in gm.graph.nodes if n.op == "call_module").meta

    def test_nothing_runs_without_examples(self):
        """Without examples even parameter-only ops are not run (a bad view is only recorded)."""

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(4, 3))

            def forward(self, x):
                return x + self.w.view(5)

        assert specfx.trace(M()).code == torch.fx.symbolic_trace(M()).code


class TestUserTerms:
    """Messages and records name the user's expressions and inputs, never FX node names."""

    def test_refusal_names_expression_and_key_path(self):
        """A refused decision names the expression and the input key path it depends on."""

        def f(x, **kwargs):
            if kwargs["attention_mask"].sum() > 0:
                return x
            return -x

        with pytest.raises(SpecializationError) as caught:
            specfx.trace(f, (torch.ones(2),), {"attention_mask": torch.ones(2)})
        assert str(caught.value).splitlines()[0] == (
            "bool() of `kwargs['attention_mask'].sum() > 0` (depends on argument `kwargs['attention_mask']`) "
            "needs a concrete value (traced value: True), but Specialize.BOOL is not allowed by the policy in force."
        )

    def test_record_and_guard_name_the_expression(self):
        """Records carry the expression and depends_on; the guard message repeats them."""

        def f(xs, y):
            total = xs[1] * y
            if total.mean() > 0:
                return total
            return -total

        gm = specfx.trace(f, ([torch.ones(2), torch.ones(2)], torch.ones(2)), policy=Policy(bool=True))
        (record,) = gm.specializations
        assert (record.expression, record.depends_on) == ("bool(total.mean() > 0)", ("xs[1]", "y"))
        assert "gt" not in specfx.explain(gm).split()
        with pytest.raises(GuardError) as caught:
            gm([torch.ones(2), -torch.ones(2)], torch.ones(2))
        assert str(caught.value).startswith(
            "specfx guard failed: the graph was traced assuming bool(total.mean() > 0) == True"
        )


class TestBytecodeForms:
    """Per-version bytecode knowledge lives in one table (specfx._frames.bytecode)."""

    @staticmethod
    def _listing(*ops):
        import dis
        # (from a real instruction: Instruction's fields differ between Python versions)
        template = next(iter(dis.get_instructions(lambda: None)))
        return [template._replace(opname=opname, opcode=0, arg=None, argval=argval, argrepr=argrepr, offset=offset)
                for offset, (opname, argval, argrepr) in enumerate(ops)]

    def test_constant_subscript_on_this_python(self):
        """`x.shape[1]` reads one dimension with this interpreter's own bytecode."""

        def f(x):
            return x.view(-1, x.shape[1])

        gm = specfx.trace(f, torch.ones(2, 3), policy=Policy(shapes=True))
        assert [s.expression for s in gm.specializations] == ["x.size(1)"]

    def test_python_3_14_spells_small_ints_and_subscripts_differently(self):
        """3.14 loads small ints with LOAD_SMALL_INT and subscripts with BINARY_OP []."""
        from specfx._frames.bytecode import constant_subscript, forms_for

        new = self._listing(("LOAD_ATTR", "shape", "shape"), ("LOAD_SMALL_INT", 1, "1"), ("BINARY_OP", 26, "[]"))
        old = self._listing(("LOAD_ATTR", "shape", "shape"), ("LOAD_CONST", 1, "1"), ("BINARY_SUBSCR", None, ""))
        assert constant_subscript(new, 0, forms_for((3, 14))) == 1
        assert constant_subscript(old, 0, forms_for((3, 11))) == 1
        assert constant_subscript(new, 0, forms_for((3, 11))) is None
        not_subscript = self._listing(("LOAD_ATTR", "shape", "shape"), ("LOAD_SMALL_INT", 1, "1"), ("BINARY_OP", 0, "+"))
        assert constant_subscript(not_subscript, 0, forms_for((3, 14))) is None


class TestSymbolicFormatting:
    def test_format_without_examples_is_torch_fx_text(self):
        """Traced without examples, an f-string of a proxy reads as torch.fx's (no decision)."""

        def f(x):
            torch._assert(x.dim() == 2, f"bad {x}")
            return x + 1

        assert specfx.trace(f).code == torch.fx.symbolic_trace(f).code


class TestFramesTakenAtTheEntry:
    """The frame a decision reads (to see `a, b = t` or `x.shape[1]`) is taken where the value is
    demanded and handed down: a wrapper between the dunder and the tracer's hook changes nothing."""

    class WrappingTracer(specfx.SpecTracer):
        """A subclass whose hooks add a frame on the path, as extensions do."""

        def iter(self, obj, frame=None):
            return super().iter(obj, frame)

        def read_attribute(self, proxy, name, attribute, frame=None):
            return super().read_attribute(proxy, name, attribute, frame)

    def test_unpacking_is_seen_through_a_wrapper(self):
        """`a, b = torch.chunk(...)` is fixed by the code (no flag needed) under a wrapping tracer."""

        def f(x):
            a, b = torch.chunk(x, 2)
            return a * b

        for tracer_class in (specfx.SpecTracer, self.WrappingTracer):
            gm = specfx.trace(f, torch.ones(4, 2), tracer_class=tracer_class)
            assert [str(s.kind) for s in gm.specializations] == ["unpack"]
            assert torch.equal(gm(torch.arange(6.0).view(6, 1)), f(torch.arange(6.0).view(6, 1)))

    def test_one_dimension_is_seen_through_a_wrapper(self):
        """`x.shape[1]` decides dimension 1 alone (not the whole shape) under a wrapping tracer."""

        def f(x):
            return x.view(-1, x.shape[1])

        for tracer_class in (specfx.SpecTracer, self.WrappingTracer):
            gm = specfx.trace(f, torch.ones(2, 3), policy=Policy(shapes=True), tracer_class=tracer_class)
            assert [(str(s.kind), s.value) for s in gm.specializations] == [("size", 3)]
            assert gm(torch.ones(5, 3)).shape == (5, 3)  # another batch size: only dim 1 is guarded

    def test_grad_mode_read_is_seen_through_a_patch_dispatcher(self):
        """`torch.is_grad_enabled()` in model code is a guarded read however many of specfx's own
        frames (its patch dispatcher) lie between the model and the patched function."""

        def f(x):
            return x * 2 if torch.is_grad_enabled() else x

        gm = specfx.trace(f, torch.ones(2), policy=Policy(bool=True))
        assert [str(s.kind) for s in gm.specializations] == ["grad_enabled"]
        with torch.no_grad(), pytest.raises(GuardError, match="is_grad_enabled"):
            gm(torch.ones(2))


class TestAsTensorOfTracedValues:
    """``torch.as_tensor``/``torch.asarray`` of a traced tensor: torch reads its argument
    through the DLPack protocol before ``__torch_function__``; the call is a node."""

    @pytest.mark.parametrize("convert", [
        lambda x: torch.as_tensor(x, device=x.device),
        lambda x: torch.as_tensor(x, dtype=torch.float64),
        lambda x: torch.as_tensor(x),
        lambda x: torch.asarray(x, device=x.device),
        lambda x: torch.as_tensor([x.shape[0], 2]),
    ], ids=["device", "dtype", "plain", "asarray", "traced sizes in a list"])
    def test_matches_eager_on_another_shape(self, convert):
        def f(x):
            return convert(x) * 2

        gm = specfx.trace(f, torch.randn(3))
        for x in (torch.randn(3), torch.randn(5)):
            expected = f(x)
            got = gm(x)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected, rtol=0, atol=0)

    def test_aliasing_is_eagers(self):
        """as_tensor of a tensor of the same dtype and device is that tensor, in the graph too."""
        def f(x):
            y = torch.as_tensor(x, device=x.device)
            y.add_(1)
            return y

        gm = specfx.trace(f, torch.zeros(2))
        x = torch.zeros(2)
        assert gm(x) is not None and torch.equal(x, torch.ones(2))
