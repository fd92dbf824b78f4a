"""trace(): inputs, signatures, outputs, metadata, check_inputs, warnings."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from torch import nn

import specfx
from specfx import Policy, SpecializationWarning, TraceCheckError

from .models import Loop, SplitCat


class Signature(nn.Module):
    def forward(self, x, y=None, *rest, scale=2.0, **extra):
        out = x * scale
        if y is not None:
            out = out + y
        for r in rest:
            out = out + r
        for key in sorted(extra):
            out = out + extra[key]
        return out


class TestSignature:
    def test_forward_signature_matches_model(self):
        """The GraphModule's forward has the model's parameters, kinds and defaults."""
        gm = specfx.trace(Signature(), (torch.ones(2), torch.ones(2), torch.ones(2)), {"k": torch.ones(2)},
                          policy=Policy(iter=True))
        params = inspect.signature(gm.forward).parameters
        assert [(p.name, p.kind.name) for p in params.values()] == [
            ("x", "POSITIONAL_OR_KEYWORD"), ("y", "POSITIONAL_OR_KEYWORD"), ("rest", "VAR_POSITIONAL"),
            ("scale", "KEYWORD_ONLY"), ("extra", "VAR_KEYWORD"),
        ]
        assert params["scale"].default == 2.0

    def test_calls_like_the_model(self):
        """Positional extras, keyword-only defaults and **kwargs bind as in eager."""
        model = Signature()
        args = (torch.ones(2), torch.full((2,), 2.0), torch.full((2,), 3.0))
        gm = specfx.trace(model, args, {"k": torch.ones(2)}, policy=Policy(iter=True))
        assert torch.equal(gm(*args, k=torch.ones(2)), model(*args, k=torch.ones(2)))
        assert torch.equal(gm(*args, scale=5.0, k=torch.ones(2)), model(*args, scale=5.0, k=torch.ones(2)))

    def test_default_not_given_keeps_default(self):
        """A defaulted parameter with no example keeps its default value."""
        gm = specfx.trace(Signature(), (torch.ones(2),), policy="iter")
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(gm(torch.ones(2), scale=3.0), torch.full((2,), 3.0))

    def test_single_tensor_is_one_argument(self):
        """A non-tuple example_inputs is the single positional argument."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), policy="iter")
        assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["x"]

    def test_nested_inputs_and_outputs(self):
        """Lists/dicts of tensors go in and come out with the same structure."""

        def f(batch, pair):
            a, b = pair
            return {"sum": batch["x"] + a, "parts": [a * 2, (b, batch["y"])]}

        batch, pair = {"x": torch.ones(2), "y": torch.zeros(2)}, [torch.ones(2), torch.ones(2)]
        gm = specfx.trace(f, (batch, pair))
        out, ref = gm(batch, pair), f(batch, pair)
        assert specfx._trace.check.compare_outputs(ref, out) is None
        assert isinstance(out["parts"][1], tuple)

    def test_function_root(self):
        """A plain function traces to a GraphModule named after it."""

        def double(x):
            return x * 2

        gm = specfx.trace(double, torch.ones(2))
        assert isinstance(gm, torch.fx.GraphModule) and type(gm).__name__ == "double"

    def test_no_examples_is_symbolic(self):
        """With no examples nothing carries a value and no specialization happens."""
        gm = specfx.trace(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        assert gm.specializations == []
        assert all("tensor_meta" not in n.meta for n in gm.graph.nodes)


class TestMetadata:
    def test_tensor_meta_from_example_run(self):
        """Each tensor node has shape/dtype metadata from the example run."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter")
        meta = {n.name: n.meta.get("tensor_meta") for n in gm.graph.nodes}
        assert meta["x"].shape == (1, 4, 3, 3) and meta["x"].dtype == torch.float32
        assert [m.shape for m in meta["split"]] == [(1, 2, 3, 3), (1, 2, 3, 3)]
        assert meta["cat"].shape == (1, 4, 3, 3)

    def test_specializations_records(self):
        """Records carry kind, flag, value, node, location, module and guard name."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter")
        (record,) = gm.specializations
        assert (record.kind, record.flag, record.value, record.node) == ("iter", specfx.Specialize.ITER_LEN, 2, "split")
        assert record.source == "return self.call_cat(*x)" and record.where.endswith(f":{record.location.lineno}")
        assert record.guard in {n.name for n in gm.graph.nodes}


class TestCheckInputs:
    def test_passing_check_inputs(self):
        """Inputs covered by the guards pass silently."""
        specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter",
                     check_inputs=[torch.randn(2, 4, 5, 5), (torch.randn(1, 3, 1, 1),)])

    def test_guard_failure_names_index(self):
        """A check input outside the guards raises TraceCheckError with its index."""
        with pytest.raises(TraceCheckError, match=r"check_inputs\[1\]: a guard failed") as caught:
            specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter",
                         check_inputs=[torch.randn(1, 4, 3, 3), torch.randn(1, 6, 3, 3)])
        assert caught.value.index == 1

    def test_output_mismatch_without_guards(self):
        """With guards=False a wrong graph is caught as an output difference."""
        with pytest.raises(TraceCheckError, match=r"check_inputs\[0\]: the traced graph's output differs"):
            specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter", guards=False,
                         check_inputs=[torch.randn(1, 6, 3, 3)])

    def test_eager_failure_is_reported(self):
        """A check input the eager model rejects is reported as such."""
        with pytest.raises(TraceCheckError, match="the eager model itself raised"):
            specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter", check_inputs=[torch.randn(3)])

    def test_kwargs_entries(self):
        """A dict entry in check_inputs is passed as keyword arguments."""
        specfx.trace(Signature(), (torch.ones(2),), policy="iter",
                     check_inputs=[{"x": torch.ones(2), "scale": 3.0}])


class TestDegenerateWarning:
    def test_length_one_warns_once(self):
        """Deciding on a length-1 container warns that the example may not be representative."""
        with pytest.warns(SpecializationWarning, match=r"len\(torch.unbind\(x\)\) == 1"):
            gm = specfx.trace(Loop(), torch.randn(1, 3), policy="iter")
        assert gm.specializations[0].degenerate

    def test_size_one_dimension_predicate_warns(self):
        """`if x.shape[0] > 1` decided on a batch of 1 warns."""

        def f(x):
            return x - x.mean(0) if x.shape[0] > 1 else x

        with pytest.warns(SpecializationWarning, match=r"bool\(x.shape\[0\] > 1\) == False"):
            specfx.trace(f, torch.randn(1, 3), policy="bool")

    def test_representative_example_does_not_warn(self):
        """A length-2 decision does not warn."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            specfx.trace(Loop(), torch.randn(2, 3), policy="iter")


class TestRetrace:
    def test_trace_of_a_traced_graph(self):
        """specfx.trace accepts a GraphModule and keeps its guards."""
        gm = specfx.trace(SplitCat(), torch.randn(1, 4, 3, 3), policy="iter")
        again = specfx.trace(gm, torch.randn(1, 4, 3, 3))
        assert "specfx_guard_len" in again.code
        with pytest.raises(specfx.GuardError):
            again(torch.randn(1, 6, 3, 3))


class Attention(nn.Module):
    """A torch.nn built-in (a leaf for torch.fx) inside a model with a branch."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        y, _ = self.attn(x, x, x)
        return y if x.shape[1] > 1 else -y


class SignBranch(nn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class KeepSplitCatWhole(specfx.SpecTracer):
    """A tracer subclass: SplitCat becomes one call_module node."""

    def is_leaf_module(self, m, module_qualified_name):
        return isinstance(m, SplitCat) or super().is_leaf_module(m, module_qualified_name)


class TestExtending:
    def test_trace_through_a_torch_nn_module(self):
        """trace_through= traces into an nn built-in: no call_module for it, output equal to eager."""
        model = Attention().eval()
        x = torch.randn(2, 5, 8)
        leaf = specfx.trace(model, x, policy=Policy(bool=True))
        through = specfx.trace(model, x, policy=Policy(bool=True, shapes=True),
                               trace_through=[nn.MultiheadAttention])
        assert [n.target for n in leaf.graph.nodes if n.op == "call_module"] == ["attn"]
        assert not [n for n in through.graph.nodes if n.op == "call_module" and n.target == "attn"]
        for batch in (x, torch.randn(3, 5, 8)):
            torch.testing.assert_close(through(batch), model(batch), rtol=0, atol=1e-6)
        assert any(s.kind == "bool" for s in through.specializations)

    def test_trace_through_by_name_and_leaf_wins(self):
        """Qualified names work; a module named in both leaf_modules and trace_through stays a leaf."""
        model, x = Attention().eval(), torch.randn(2, 5, 8)
        by_name = specfx.trace(model, x, policy="all", trace_through=["attn"])
        assert not [n for n in by_name.graph.nodes if n.op == "call_module"]
        both = specfx.trace(model, x, policy="bool", trace_through=["attn"], leaf_modules=["attn"])
        assert [n.target for n in both.graph.nodes if n.op == "call_module"] == ["attn"]

    def test_tracer_class(self):
        """tracer_class= traces with a SpecTracer subclass; records and guards stay trace()'s."""
        model = nn.Sequential(SplitCat(), SignBranch())
        x = torch.rand(1, 4, 2, 2) + 0.5
        gm = specfx.trace(model, x, policy=Policy(iter=True, bool=True), tracer_class=KeepSplitCatWhole)
        assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["0"]
        assert [str(s.kind) for s in gm.specializations] == ["bool"]
        assert torch.equal(gm(x), model(x))
        with pytest.raises(specfx.GuardError):
            gm(-x)

    @pytest.mark.parametrize("kwargs, match", [
        ({"tracer_class": torch.fx.Tracer}, "tracer_class= takes a subclass of specfx.SpecTracer"),
        ({"trace_through": [3]}, "trace_through= takes nn.Module subclasses"),
    ])
    def test_bad_arguments(self, kwargs, match):
        """A tracer class that is not a SpecTracer, or a non-module in trace_through, is a TypeError."""
        with pytest.raises(TypeError, match=match):
            specfx.trace(SplitCat(), torch.randn(1, 4, 2, 2), **kwargs)


class TestCheckInputsWithConcreteArgs:
    def test_eager_gets_the_baked_value(self):
        """check_inputs run eager with the concrete_args the graph baked in (eager with its default would differ,
        and the graph takes no such argument)."""

        def repeated(x, times=2):
            return torch.cat([x for _ in range(times)])

        gm = specfx.trace(repeated, torch.randn(3), concrete_args={"times": 3}, check_inputs=[torch.randn(5)])
        x = torch.randn(4)
        assert torch.equal(gm(x), repeated(x, times=3))
