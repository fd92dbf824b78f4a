"""Values written on the command line (``--input``, ``--kwarg``, ``--concrete-arg``,
``--check-input``): a torch factory call with literal arguments, or a Python literal.

Each text is checked as soon as the command line is read, without importing torch, so
that a typo is reported at once rather than after the model is built; the value is built
later, without ``eval``.

>>> checked = check_value("ones(2, 3, dtype=float16)", "--input")
>>> build(checked).dtype
torch.float16
>>> build(check_value("[1, 2]", "--input"))
[1, 2]
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, NamedTuple, Tuple

__all__ = ["FACTORIES", "CheckedValue", "UsageError", "build", "check_arguments", "check_value", "parse_input"]

FACTORIES = ("randn", "rand", "zeros", "ones", "empty", "full", "arange", "randint", "tensor")


class UsageError(Exception):
    """A bad command-line argument: reported as one line, exit code 2."""


class CheckedValue(NamedTuple):
    """A value's text, parsed and checked: a factory call or a literal, not built yet."""

    text: str
    option: str
    tree: ast.expr


def check_value(text: str, option: str) -> CheckedValue:
    """Parse ``text`` (given to ``option``) and check that it is a factory call with literal
    arguments or a Python literal; torch is not imported."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise UsageError(f"{option} {text!r}: cannot parse it ({error.msg})") from None
    _check_tree(tree, text, option)
    return CheckedValue(text, option, tree)


def check_arguments(text: str, option: str) -> Tuple[List[CheckedValue], Dict[str, CheckedValue]]:
    """The arguments of one call, as written between the parentheses of ``model(...)``:
    ``'randn(4, 8)'``, ``'randn(4, 8), ones(4)'``, ``'input_ids=randint(0, 9, (4, 16))'``."""
    try:
        call = ast.parse(f"_({text.strip()})", mode="eval").body
    except SyntaxError as error:
        raise UsageError(f"{option} {text!r}: cannot parse it as call arguments ({error.msg})") from None
    assert isinstance(call, ast.Call)
    positional: List[CheckedValue] = []
    named: Dict[str, CheckedValue] = {}
    for node in call.args:
        if isinstance(node, ast.Starred):
            raise UsageError(f"{option} {text!r}: *arguments are not values")
        _check_tree(node, text, option)
        positional.append(CheckedValue(ast.unparse(node), option, node))
    for keyword in call.keywords:
        if keyword.arg is None:
            raise UsageError(f"{option} {text!r}: **arguments are not values")
        _check_tree(keyword.value, text, option)
        named[keyword.arg] = CheckedValue(ast.unparse(keyword.value), option, keyword.value)
    if not positional and not named:
        raise UsageError(f"{option} needs at least one value, e.g. {option} 'randn(4, 8)'")
    return positional, named


def _check_tree(tree: ast.expr, text: str, option: str) -> None:
    if isinstance(tree, ast.Call):
        name = _factory_name(tree)
        if name not in FACTORIES:
            called = ast.unparse(tree.func)
            raise UsageError(f"{option} {text!r}: {called}() is not one of {', '.join(FACTORIES)}")
        for keyword in tree.keywords:
            if keyword.arg is None:
                raise UsageError(f"{option} {text!r}: arguments must be literals, not **{ast.unparse(keyword.value)}")
            if keyword.arg == "dtype":
                try:
                    _dtype_name(keyword.value)
                except ValueError as error:
                    raise UsageError(f"{option} {text!r}: {error}") from None
        for argument in [*tree.args, *(k.value for k in tree.keywords if k.arg != "dtype")]:
            try:
                ast.literal_eval(argument)
            except (ValueError, TypeError, SyntaxError):
                raise UsageError(f"{option} {text!r}: arguments must be literals (numbers, strings, tuples, "
                                 f"lists), not `{ast.unparse(argument)}`") from None
        return
    try:
        ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError):
        raise UsageError(f"{option} {text!r} is neither a torch factory call ({', '.join(FACTORIES)}) "
                         f"nor a Python literal") from None


def _factory_name(call: ast.Call) -> str:
    function = call.func
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.value.id == "torch":
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def _dtype_name(node: ast.expr) -> str:
    """``dtype=float16`` or ``dtype=torch.float16`` (or a string): the dtype's name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.removeprefix("torch.")
    raise ValueError("dtype= takes a dtype name such as float16 or int64")


def build(value: CheckedValue) -> Any:
    """The value ``value`` describes: the factory called, or the literal."""
    tree, text, option = value.tree, value.text, value.option
    if not isinstance(tree, ast.Call):
        return ast.literal_eval(tree)
    import torch

    name = _factory_name(tree)
    args = [ast.literal_eval(a) for a in tree.args]
    kwargs: Dict[str, Any] = {}
    for keyword in tree.keywords:
        if keyword.arg == "dtype":
            dtype_name = _dtype_name(keyword.value)
            dtype = getattr(torch, dtype_name, None)
            if not isinstance(dtype, torch.dtype):
                raise UsageError(f"{option} {text!r}: {dtype_name!r} is not a torch dtype (float32, float16, "
                                 f"bfloat16, int64, bool, ...)")
            kwargs["dtype"] = dtype
        else:
            kwargs[str(keyword.arg)] = ast.literal_eval(keyword.value)
    try:
        return getattr(torch, name)(*args, **kwargs)
    except Exception as error:  # torch's own words, whatever it raises (no CUDA: AssertionError)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"{option} {text!r}: torch.{name} says: {first}") from None


def parse_input(text: str) -> Any:
    """Build an example input from ``text`` without ``eval``: a torch factory
    call with literal arguments, or a Python literal.

    >>> parse_input("ones(2, 3, dtype=float16)").dtype
    torch.float16
    >>> parse_input("[1, 2]")
    [1, 2]
    """
    return build(check_value(text, "--input"))
