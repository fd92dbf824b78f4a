"""Threads that do not trace see no trace: unpatched isinstance, is_fx_tracing()
False, torch.nested working. Synchronized with barriers, never sleeps."""

from __future__ import annotations

import builtins
import math
import threading

import torch
import torch.fx._symbolic_trace as fx_trace
from torch import nn

import specfx
from specfx import SpecTracer

TIMEOUT = 30  # seconds; a barrier that times out fails the test instead of hanging it


class _Observations:
    """Where forward records what it saw: not a container on the model (those are put back)."""

    def __init__(self, into):
        self.into = into

    def __setitem__(self, key, value):
        self.into[key] = value


class PausesWhileTracing(nn.Module):
    """Holds the trace at its first line until another thread has looked around."""

    def __init__(self, inside, done, seen_here):
        super().__init__()
        self.inside, self.done = inside, done
        self.seen_here = seen_here  # filled by forward (the dict's contents are put back after tracing)

    def forward(self, x):
        self.seen_here["is_fx_tracing"] = fx_trace.is_fx_tracing()
        self.seen_here["isinstance"] = isinstance(x, torch.Tensor)
        self.inside.wait(TIMEOUT)
        self.done.wait(TIMEOUT)
        return x * 2


def trace_while(look_around):
    """Trace in this thread while ``look_around()`` runs in another; return its result."""
    inside, done = threading.Barrier(2), threading.Barrier(2)
    seen_here = {}
    model = PausesWhileTracing(inside, done, _Observations(seen_here))
    result = {}

    def other():
        inside.wait(TIMEOUT)
        try:
            result["value"] = look_around()
        finally:
            done.wait(TIMEOUT)

    thread = threading.Thread(target=other)
    thread.start()
    specfx.trace(model, (torch.ones(2),))
    thread.join()
    return seen_here, result["value"]


class TestOtherThreads:
    def test_is_fx_tracing_is_false_elsewhere(self):
        here, there = trace_while(lambda: (fx_trace.is_fx_tracing(), fx_trace.is_fx_symbolic_tracing()))
        assert here["is_fx_tracing"] is True
        assert there == (False, False)

    def test_nested_tensors_work_elsewhere(self):
        def make_nested():
            values = torch.arange(6.0)
            nested = torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor([0, 2, 6]))
            return nested.values().sum().item()

        _, there = trace_while(make_nested)
        assert there == 15.0

    def test_isinstance_elsewhere_reaches_the_previous_isinstance(self):
        calls = []
        original = builtins.isinstance

        def users_isinstance(obj, classinfo):
            calls.append(threading.get_ident())
            return original(obj, classinfo)

        builtins.isinstance = users_isinstance
        try:
            here, there = trace_while(lambda: (threading.get_ident(), isinstance(1, int), isinstance(1, str)))
        finally:
            builtins.isinstance = original
        ident, is_int, is_str = there
        assert here["isinstance"] is True  # the proxy answered as its tensor value
        assert (is_int, is_str) == (True, False)
        assert ident in calls  # the other thread's calls reached the user's patch

    def test_a_proxy_is_not_a_tensor_to_another_thread(self):
        # isinstance's answer for a proxy depends on the thread asking, never on the proxy alone
        inside, done = threading.Barrier(2), threading.Barrier(2)
        captured = {}

        class Leaks(nn.Module):
            def forward(self, x):
                captured["proxy"] = x
                inside.wait(TIMEOUT)
                done.wait(TIMEOUT)
                return x + 1

        result = {}

        def other():
            inside.wait(TIMEOUT)
            try:
                result["is_tensor"] = isinstance(captured["proxy"], torch.Tensor)
            finally:
                done.wait(TIMEOUT)

        thread = threading.Thread(target=other)
        thread.start()
        specfx.trace(Leaks(), (torch.ones(2),))
        thread.join()
        assert result["is_tensor"] is False


def type_checks():
    """Run by another thread while this module's code is traced (its `type` is specfx's then)."""
    return {
        "type(cls) is type": type(PausesWhileTracing) is type,
        "type(nn.Module) == type": type(nn.Module) == type,  # noqa: E721
        "type(type) is type": type(type) is type,
        "type(int) in (type,)": type(int) in (type,),
        "type(3) is int": type(3) is int,
        "type(obj) is type": type(_Observations({})) is type,
        "isinstance(int, type)": isinstance(int, type),
        "issubclass(bool, type)": issubclass(bool, type),
        "type.__name__": type.__name__,
        "{type: ...}[type(int)]": {type: "a class"}.get(type(int)),
        "int.__class__ == type": int.__class__ == type,  # noqa: E721
    }


class TestTypeElsewhere:
    def test_type_calls_of_the_traced_module_answer_as_eager_in_another_thread(self):
        _, there = trace_while(lambda: (globals()["type"] is builtins.type, type_checks()))
        shadowed_builtin_seen, answers = there
        assert shadowed_builtin_seen is False  # the trace did shadow `type` here: the checks below ran on it
        assert answers == type_checks()


class TestAutowrapElsewhere:
    def test_a_tracer_made_while_another_thread_traces_lists_maths_own_functions(self):
        """torch.fx wraps math's functions in math's dict while it traces; a tracer made meanwhile
        listed those wrappers' ids, which once freed named other objects (a `torch.fx.wrap`-ed
        function's wrapper, wrapped twice then and left in its module after the trace)."""
        _, made_meanwhile = trace_while(SpecTracer)
        at_rest = SpecTracer()
        assert id(math.degrees) in made_meanwhile._autowrap_function_ids
        assert made_meanwhile._autowrap_function_ids == at_rest._autowrap_function_ids
