"""specfx._frames.bytecode's reading of model code's try blocks (exception tables, Python >= 3.11)."""

from __future__ import annotations

import dis
import sys

import pytest
import torch

from specfx._frames.bytecode import clause_types, exception_handlers, type_checks

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="exception tables are Python >= 3.11")


def _handlers_at_call(fn, name):
    """The handlers around the call of ``name`` (a method or global) inside ``fn``."""
    listing = list(dis.get_instructions(fn))
    load = next(i for i, inst in enumerate(listing) if inst.argval == name)
    call = next(inst for inst in listing[load:] if inst.opname in ("CALL", "BINARY_OP"))
    return exception_handlers(fn.__code__, call.offset)


def nested(x, ctx):
    try:
        try:
            with ctx:
                y = x.matmul(x)
        except (TypeError, torch.jit.Error):
            y = 1
    except RuntimeError:
        y = 2
    finally:
        y = 3
    try:
        z = x.cos()
    except:  # noqa: E722 - a bare except is one of the forms read
        z = 0
    return y, z


def test_handlers_are_listed_innermost_first_with_their_lines():
    first = nested.__code__.co_firstlineno
    handlers = _handlers_at_call(nested, "matmul")
    assert [(h.kind, h.line - first) for h in handlers] == [
        ("with", 3), ("except", 5), ("except", 7), ("finally", 10)]  # (its first statement)
    assert _handlers_at_call(nested, "cos")[0].clauses == ((),)  # bare `except:`


def test_clause_types_are_read_in_the_frame():
    frame = sys._getframe()
    inner, outer = _handlers_at_call(nested, "matmul")[1:3]
    assert clause_types(inner.clauses[0], frame) == (TypeError, torch.jit.Error)
    assert clause_types(outer.clauses[0], frame) == (RuntimeError,)


def test_code_without_try_blocks_has_no_handlers():
    def plain(x):
        return x.matmul(x)

    assert _handlers_at_call(plain, "matmul") == ()


def branches(x, n):
    if type(x) is torch.Tensor:
        y = x.cos()
    else:
        y = x.sin()
    for _ in range(n):
        if type(y) in (list, tuple):
            y = y[0]
    return y.exp()


def _offset_of(fn, name):
    return next(inst.offset for inst in dis.get_instructions(fn) if inst.argval == name)


def test_a_compared_type_call_dominates_both_branches_but_not_a_loop_exit():
    first, in_loop = type_checks(branches.__code__)
    assert (first.argument, first.line - branches.__code__.co_firstlineno) == (("x",), 1)
    for method in ("cos", "sin", "exp"):
        assert _offset_of(branches, method) in first.dominated
    assert first.always and not first.stored
    assert in_loop.argument == ("y",) and in_loop.reassigned  # `y = y[0]` after it
    assert _offset_of(branches, "exp") not in in_loop.dominated  # the loop may run no time
    assert not in_loop.always


def test_type_calls_not_compared_are_not_checks():
    def message(x):
        return f"got {type(x)}", type(x).__name__

    assert type_checks(message.__code__) == ()


def test_identity_checks_are_found_for_locals_compared_with_is_or_passed_to_id():
    def f(x, k, n):
        a = x if k is SENTINEL else x * 2
        b = x if n is None else x * 3  # `is None` is answered truly: not a check
        return a + b + id(k)

    checks = [(c.kind, c.argument) for c in type_checks(f.__code__)]
    assert ("identity", ("k",)) in checks
    assert ("identity", ("n",)) not in checks
    assert checks.count(("identity", ("k",))) == 2  # the `is` and the id()


SENTINEL = 4
