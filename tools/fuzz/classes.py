"""The differential fuzzer's grammar for the classes of silent answers (docs/soundness.md).

Each class of answers a trace may take from an example (see docs/soundness.md) has
a family of templates here; :func:`generate` picks one, fills in its random choices
(constants, shapes, which variant, the policy) and returns a :class:`ClassCase`:
Python source defining ``f``, an example and fresh inputs. ``python -m tools.fuzz.run --grammar
classes`` traces ``f`` with specfx (widening the policy to ``Specialize.ALL`` after a
refusal) and runs eager and the graph on every input, with the same RNG seed and the
same grad mode: each input *agrees*, is *guarded* (``GuardError``) or is a *silent
mismatch* (must be 0).
"""

from __future__ import annotations

import dataclasses
import linecache
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

import specfx

__all__ = ["CLASSES", "ClassCase", "generate"]


@dataclasses.dataclass
class ClassCase:
    """One program of one class: ``source`` defines ``f(*example)``; ``inputs`` are
    further argument tuples, each with the grad mode to call it under."""

    family: str
    source: str
    example: Tuple[Any, ...]
    inputs: List[Tuple[Tuple[Any, ...], bool]]
    policy: specfx.Policy

    def build(self, tag: str) -> Callable[..., Any]:
        """Compile ``source`` under a file name of its own (so locations have their text)."""
        filename = f"<fuzzclass{tag}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        namespace: Dict[str, Any] = {"torch": torch, "specfx": specfx}
        exec(compile(self.source, filename, "exec"), namespace)
        return namespace["f"]


def _t(ch: Any, *shape: int) -> torch.Tensor:
    return torch.randn(*shape) * ch.choice([1.0, 0.1, 10.0]) + ch.choice([0.0, 0.5, -0.5])


def _shapes(ch: Any) -> Tuple[int, int]:
    return ch.choice([1, 2, 3, 4]), ch.choice([1, 2, 3, 5])


def _policy(ch: Any) -> specfx.Policy:
    return specfx.Policy(iter=ch.chance(0.5), bool=ch.chance(0.5), shapes=ch.chance(0.5), scalars=ch.chance(0.5))


def _grad(ch: Any) -> bool:
    return not ch.chance(0.2)


def inplace_then_decide(ch: Any) -> ClassCase:
    """Class 1: the same read before and after an in-place change."""
    read = ch.choice(["y.sum().item()", "float(y.sum())", "int(y.sum() > 0)", "bool(y.max() > 0)",
                      "sum(y.tolist())", "y.tolist()[0]"])  # (the last two read y itself, the same node)
    change = ch.choice(["y.add_(z)", "y.mul_(-1)", "y.copy_(z)", "y += z", "y[0] = z[0]"])
    source = f"def f(y, z):\n    a = {read}\n    {change}\n    b = {read}\n    return y * (a + 2 * b)\n"
    n = ch.choice([1, 2, 3])
    y = _t(ch, n)
    # half of the inputs keep the example's y: the first read then holds, only the second can differ
    make = lambda: (y.clone() if ch.chance(0.5) else _t(ch, n), _t(ch, n))  # noqa: E731
    return ClassCase("inplace", source, (y, _t(ch, n)), [(make(), _grad(ch)) for _ in range(4)], _policy(ch))


def optional_inputs(ch: Any) -> ClassCase:
    """Class 2: ``is None`` / ``is not None`` on optional inputs and elements."""
    n = ch.choice([2, 3])
    form = ch.choice(["argument", "element", "masked"])
    if form == "argument":
        source = "def f(x, bias=None):\n    if bias is not None:\n        x = x + bias\n    return x * 2\n"
        make = lambda: (_t(ch, n), None if ch.chance(0.5) else _t(ch, n))  # noqa: E731
    elif form == "element":
        source = "def f(x, pair):\n    a, b = pair\n    return x * a if b is None else x * a + b\n"
        make = lambda: (_t(ch, n), (_t(ch, n), None if ch.chance(0.5) else _t(ch, n)))  # noqa: E731
    else:
        source = ("def f(s, mask=None):\n    if mask is None:\n        return s.softmax(-1)\n"
                  "    return s.masked_fill(mask, -1e4).softmax(-1)\n")
        make = lambda: (_t(ch, n, n), None if ch.chance(0.5) else torch.rand(n, n) > 0.5)  # noqa: E731
    return ClassCase("optional", source, make(), [(make(), _grad(ch)) for _ in range(4)], _policy(ch))


def factories(ch: Any) -> ClassCase:
    """Classes 3, 4 and 10: tensors made in forward, symbolic sizes, random draws."""
    body = ch.choice([
        "pad = torch.zeros(x.shape[0], 1)\n    pad += x[:, :1]\n    return pad",
        "return x + torch.randn(x.shape)",
        "out = torch.zeros(x.shape[0], 2)\n    out[:, 0] = x[:, 0]\n    return out",
        "mask = torch.rand(x.shape[0], x.shape[1]) > 0.5\n    return x * mask",
        "return torch.ones(x.shape[1] * x.shape[0], 2).sum() + x",
        "return x + torch.tensor(x.size(-1))",
        "return x * torch.arange(x.shape[-1])",
        "if torch.rand([]) < 0.5:\n        return x\n    return x * 2",
        "return x[torch.randperm(x.shape[0])]",
        "g = torch.Generator().manual_seed(0)\n    return x + torch.rand(x.shape, generator=g)",
        "return x + torch.full((x.shape[0], 1), float(x.shape[1]))",
    ])
    rows, cols = _shapes(ch)
    make = lambda: (_t(ch, ch.choice([rows, rows + 1, 1]), ch.choice([cols, cols + 2])),)  # noqa: E731
    return ClassCase("factories", f"def f(x):\n    {body}\n", (_t(ch, rows, cols),),
                     [(make(), _grad(ch)) for _ in range(4)], _policy(ch))


def caught(ch: Any) -> ClassCase:
    """Classes 5 and 6: refusals and op failures inside ``try``/``except`` (also an op that works
    on the example in a helper called inside the try, under a ``finally``)."""
    caught_types = ch.choice(["TypeError", "ValueError", "RuntimeError", "Exception", "(TypeError, ValueError)"])
    form = ch.choice(["refusal", "op", "split", "nested op"])
    rows, cols = _shapes(ch)
    if form == "refusal":
        source = (f"def f(x, y):\n    try:\n        n = int(x.sum() > 0) + len(torch.split(x, 1))\n"
                  f"    except {caught_types}:\n        n = 1\n    return x * n + y.sum()\n")
        make = lambda: (_t(ch, ch.choice([rows, 1]), cols), _t(ch, cols))  # noqa: E731
    elif form == "op":
        source = (f"def f(x, y):\n    try:\n        return x @ y\n    except {caught_types}:\n"
                  f"        return x * y.sum()\n")
        make = lambda: (_t(ch, rows, cols), _t(ch, ch.choice([cols, cols + 1]), ch.choice([1, 2])))  # noqa: E731
    elif form == "nested op":  # the op in a helper called inside the try, a finally, ops after it
        op = ch.choice(["torch.matmul(x, y)", "x.mm(y)", "torch.cat([x, y.t()], 1)", "x.view(-1, y.shape[0])"])
        source = (f"def g(x, y):\n    return {op} + 1\n\n"
                  f"def f(x, y):\n    try:\n        try:\n            z = g(x, y)\n        finally:\n"
                  f"            w = x.sum()\n    except {caught_types}:\n        z = x.sum() * y.sum()\n"
                  f"        w = 0\n    return z * 2 + w\n")
        make = lambda: (_t(ch, rows, cols), _t(ch, ch.choice([cols, cols + 1]), ch.choice([rows, 2])))  # noqa: E731
    else:
        source = (f"def f(x, y):\n    try:\n        parts = list(torch.split(x, 1))\n    except {caught_types}:\n"
                  f"        parts = [x]\n    return torch.cat(parts) * 2 + y.sum()\n")
        make = lambda: (_t(ch, ch.choice([rows, rows + 1]), cols), _t(ch, cols))  # noqa: E731
    return ClassCase("caught", source, make(), [(make(), _grad(ch)) for _ in range(4)], _policy(ch))


def properties(ch: Any) -> ClassCase:
    """Class 7: tensor properties read by the code, and ``type(x)`` compared."""
    test = ch.choice(["x.grad is None", "x.is_sparse", "x.layout is torch.strided", "torch.is_tensor(x)",
                      "isinstance(x, torch.nn.Parameter)", "x.requires_grad", "x.is_floating_point()",
                      "x.get_device() < 0", "hasattr(x, 'scale')", "x.dtype == torch.float32",
                      "type(x) is torch.Tensor", "type(x) == torch.nn.Parameter", "type(x).__name__ == 'Tensor'",
                      "type(x) in (torch.Tensor, torch.nn.Parameter)", "type(x) is not torch.Tensor"])
    n = ch.choice([2, 3])
    source = f"def f(x):\n    if {test}:\n        return x * 2 + getattr(x, 'scale', 1.0)\n    return x - 1\n"

    def make() -> Tuple[Any, ...]:
        x = _t(ch, n)
        kind = ch.choice(["plain", "parameter", "scaled", "double", "grad"])
        if kind == "parameter":
            x = torch.nn.Parameter(x)
        elif kind == "scaled":
            x.scale = 3.0
        elif kind == "double":
            x = x.double()
        elif kind == "grad":
            x.requires_grad_(True)
        return (x,)

    return ClassCase("properties", source, make(), [(make(), _grad(ch)) for _ in range(4)], _policy(ch))


def python_values(ch: Any) -> ClassCase:
    """Class 8: Python-valued inputs hashed (dict and set lookups), compared by identity, typed."""
    test = ch.choice(["{2: 3.0, 3: -1.0}.get(n, 0.5) > 0", "n in {2, 3}", "n is True", "isinstance(n, int)",
                      "isinstance(n, bool)", "n == 2", "{'a': 2.0}.get(str(n), 1.0) > 1"])
    source = f"def f(x, n):\n    if {test}:\n        return x * 2\n    return x - 1\n"
    size = ch.choice([2, 3])
    values = [2, 3, 5, 1, 2.0, 3.0, True, False]
    n = ch.choice(values)
    # most inputs keep the example's type (another type fails the graph's entry check first),
    # so that the guards on the value itself are what tells the inputs apart
    same_type = [v for v in values if type(v) is type(n)]
    make = lambda: (_t(ch, size), ch.choice(same_type if ch.chance(0.7) else values))  # noqa: E731
    return ClassCase("python values", source, (_t(ch, size), n), [(make(), _grad(ch)) for _ in range(4)],
                     _policy(ch))


def ambient(ch: Any) -> ClassCase:
    """Class 9: grad mode read and changed inside forward, and hooks (on a module root: see fuzz.py)."""
    body = ch.choice([
        "if torch.is_grad_enabled():\n        return x * 2\n    return x",
        "with torch.no_grad():\n        y = x * 2\n    return y + x",
        "with torch.enable_grad():\n        y = x * 2\n    return y + x",
        "with torch.set_grad_enabled(False):\n        y = x.exp()\n    return y * x",
        "torch.set_grad_enabled(True)\n    return x * 3",
    ])
    n = ch.choice([2, 3])
    make = lambda: (_t(ch, n).requires_grad_(ch.chance(0.5)),)  # noqa: E731
    return ClassCase("ambient", f"def f(x):\n    {body}\n", make(), [(make(), _grad(ch)) for _ in range(4)],
                     _policy(ch))


def policy_exactly(ch: Any) -> ClassCase:
    """Class 11: data of a shape-derived size, and f-strings of shapes."""
    body = ch.choice([
        "return x * int(torch.randint(0, 10, (x.size(0),)).sum())",
        "return x * 2 if f'{x.shape[0]}' == '2' else x",
        "return x * float(torch.ones(x.shape[0]).sum())",
        "return x * len(str(x.shape[-1]))",
    ])
    rows, cols = _shapes(ch)
    make = lambda: (_t(ch, ch.choice([rows, 2, 3]), cols),)  # noqa: E731
    return ClassCase("policy", f"def f(x):\n    {body}\n", make(), [(make(), _grad(ch)) for _ in range(4)],
                     _policy(ch))


_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.bool)


def _numbers_input(ch: Any, n: int) -> torch.Tensor:
    """Small whole numbers in a random dtype (so that inputs of other dtypes often hold the
    same numbers), sometimes laid out without contiguity."""
    values = torch.tensor([float(ch.choice([0, 1, 1, 2, 3])) for _ in range(n)])
    if ch.chance(0.3):
        values = values * ch.choice([0.5, -1.0])
    x = values.to(ch.choice(_DTYPES))
    return torch.stack([x, x]).t()[:, 0] if ch.chance(0.3) else x  # (a strided view: not contiguous)


def numbers(ch: Any) -> ClassCase:
    """Numbers read from tensor data, whose Python type follows the dtype (``.item()`` and
    ``.tolist()`` answer an int, a float or a bool), and the type-blind ones (``int()``,
    ``float()``), on inputs of every dtype, contiguous or not."""
    body = ch.choice([
        "return x * x.sum().item()",
        "return x * x.max().item()",
        "return x + sum(x.tolist()[:2])",
        "a = x.sum().item()\n    return x * (a % 3) + (a > 1)",
        "return x * int(x.sum())",
        "return x * float(x.max())",
        "return [x * i for i in range(x.sum().long() % 3)]",
        "return x * 2 if x.sum().item() > 1 else x - 1",
    ])
    n = ch.choice([1, 2, 3])
    example = _numbers_input(ch, n)

    def make() -> Tuple[Any, ...]:  # the example's numbers in another dtype or layout, or other numbers
        if ch.chance(0.6):
            x = example.to(ch.choice(_DTYPES))
            return (torch.stack([x, x]).t()[:, 0] if ch.chance(0.3) else x,)
        return (_numbers_input(ch, n),)

    return ClassCase("numbers", f"def f(x):\n    {body}\n", (example,), [(make(), _grad(ch)) for _ in range(5)],
                     _policy(ch))


CLASSES: Dict[str, Callable[[Any], ClassCase]] = {
    "inplace": inplace_then_decide, "optional": optional_inputs, "factories": factories, "caught": caught,
    "properties": properties, "ambient": ambient, "policy": policy_exactly, "python values": python_values,
    "numbers": numbers,
}


def generate(ch: Any, family: Optional[str] = None) -> ClassCase:
    """One program of ``family``, or of a family chosen by ``ch``."""
    return CLASSES[family if family is not None else ch.choice(sorted(CLASSES))](ch)
