"""specfx._frames.type_reads: user code's isinstance() sees a traced value's class, torch sees a
Proxy, and nothing global is patched (builtins.isinstance and torch.is_tensor stay put)."""

from __future__ import annotations

import abc
import builtins
import sys
import threading

import pytest
import torch
from torch import nn

import specfx
from specfx._frames import bytecode as _bytecode
def trace_and_check(f, *examples):
    gm = specfx.trace(f, examples)
    assert gm(*examples) == f(*examples)
    return gm


class TestUserCodeSeesTheValue:
    def test_isinstance_forms_answer_as_eager(self):
        check = isinstance

        Registered = abc.ABCMeta("Registered", (), {})
        Registered.register(torch.Tensor)

        def f(x, n):
            return (isinstance(x, torch.Tensor), isinstance(x, (int, torch.Tensor)), check(x, torch.Tensor),
                    builtins.isinstance(x, torch.Tensor), isinstance(x, Registered), torch.is_tensor(x),
                    isinstance(x, nn.Parameter), isinstance(n, int), isinstance(x, torch.fx.Proxy) is False)

        def traced(x, n):
            values = f(x, n)
            assert values[:-1] == (True, True, True, True, True, True, False, True)
            return x + len(values)

        specfx.trace(traced, (torch.ones(2), 3))

    @pytest.mark.skipif(sys.version_info < (3, 10), reason="match statements are Python >= 3.10")
    def test_match_class_pattern(self):
        namespace = {"torch": torch}
        exec(compile(  # (source text: the package's syntax is Python 3.9's)
            "def f(x):\n    match x:\n        case torch.Tensor():\n            return x + 1\n"
            "        case _:\n            return x\n", "<test_match>", "exec"), namespace)
        gm = specfx.trace(namespace["f"], (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))

    def test_parameter_is_a_parameter(self):
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(2))

            def forward(self, x):
                return x * 2 if isinstance(self.w, nn.Parameter) and torch.is_tensor(self.w) else x

        gm = specfx.trace(M(), (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 2.0))

    def test_the_answer_is_guarded(self):
        def f(x):
            return x + 1 if isinstance(x, torch.Tensor) else x

        gm = specfx.trace(f, (torch.ones(2),))
        with pytest.raises(specfx.GuardError):
            gm(3)


class TestTorchSeesAProxy:
    def test_torch_functions_with_two_arguments(self):
        def f(x):
            return torch.add(x, x) + torch.mul(x, 2) + torch.ones(2).add(x)

        gm = specfx.trace(f, (torch.ones(2),))
        assert torch.equal(gm(torch.ones(2)), torch.full((2,), 6.0))
        assert all(node.target is not torch.Tensor for node in gm.graph.nodes)

    def test_a_computed_callable_is_a_specialization_error_at_its_line(self):
        checks = [isinstance]

        def f(x):
            return x + 1 if checks[0](x, torch.Tensor) else x

        with pytest.raises(specfx.SpecializationError, match=r"computed function(.|\n)*checks\[0\]\(x, torch.Tensor\)"):
            specfx.trace(f, (torch.ones(2),))

    def test_a_computed_callable_of_one_argument_is_fine(self):
        ops = [torch.relu]

        def f(x):
            return ops[0](x)

        gm = specfx.trace(f, (torch.ones(2),))
        assert torch.equal(gm(-torch.ones(2)), torch.zeros(2))


class TestNothingGlobal:
    def test_isinstance_and_is_tensor_are_never_replaced(self):
        seen = {}

        def f(x):
            seen["isinstance"], seen["is_tensor"] = builtins.isinstance, torch.is_tensor
            return x + 1

        isinstance_before, is_tensor_before = builtins.isinstance, torch.is_tensor
        specfx.trace(f, (torch.ones(2),))
        assert seen == {"isinstance": isinstance_before, "is_tensor": is_tensor_before}

    def test_another_thread_gets_a_proxy(self):
        inside, done = threading.Barrier(2), threading.Barrier(2)
        captured, result = {}, {}

        def f(x):
            captured["x"] = x
            inside.wait(30)
            done.wait(30)
            return x + 1

        def other():
            inside.wait(30)
            try:
                result["answer"] = isinstance(captured["x"], torch.Tensor)
            finally:
                done.wait(30)

        thread = threading.Thread(target=other)
        thread.start()
        specfx.trace(f, (torch.ones(2),))
        thread.join()
        assert result == {"answer": False}


class TestCallSites:
    @pytest.mark.parametrize("version", [(3, 9), (3, 10), (3, 11), (3, 12), (3, 13), (3, 14)])
    def test_every_version_has_call_forms(self, version):
        forms = _bytecode.call_forms_for(version)
        assert forms.calls and all(slots in (1, 2) for slots, _ in forms.calls.values())

    def test_the_callable_of_each_call(self):
        def f(x, fns, torch):
            check = isinstance
            return isinstance(x, int), torch.is_tensor(x), check(x, int), fns[0](x, 1), isinstance(*fns)

        sites = [s for s in _bytecode.call_sites(f.__code__).values() if s.kind == "call"]
        described = {(s.callable, s.positional) for s in sites}
        assert (_bytecode.Name("global", "isinstance"), 2) in described
        assert (_bytecode.Attribute(_bytecode.Name("local", "torch"), "is_tensor"), 1) in described
        assert (_bytecode.Name("local", "check"), 2) in described
        assert (None, 2) in described  # fns[0]: computed
        assert (_bytecode.Name("global", "isinstance"), None) in described  # *args

    def test_library_code_is_analyzable(self):
        import torch.nn.functional as F
        import torch.nn.modules.transformer as transformer

        for module in (F, transformer, abc, threading):
            for value in vars(module).values():
                code = getattr(value, "__code__", None)
                if code is not None:
                    _bytecode.call_sites(code)  # raises _Unanalyzable if the simulation loses the stack
