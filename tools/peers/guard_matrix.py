"""The guard matrix of docs/guarantees.md: every kind of guard x every tool a specfx graph meets.

    python -m tools.peers.guard_matrix            # measure every cell and print the table
    python -m tools.peers.guard_matrix --write    # ... and write it into docs/guarantees.md
    python -m tools.peers.guard_matrix --check    # exit 1 unless docs/guarantees.md shows the expected table

Each case is a tiny model whose forward makes one decision (one guard kind, or a
try/except mark, or the entry's structure check), with an input that takes the traced
path and one that breaks the assumption. Each tool turns the specfx graph (or the
model, for export) into something callable. A cell is sound when the same-path input
gives eager's result (quantized tools: within 10 %) and the breaking input raises
specfx's GuardError or an error carrying specfx's message, returns eager's result, or
the tool refuses when applied with an error in specfx's words. tests/test_guard_matrix.py
measures every cell against :func:`expected` (``EXPECTED_OTHERWISE`` names the cells that
are not "raises") and checks that the page shows that table.

(No ``from __future__ import annotations`` here: torch.fx renders a string return
annotation as a global that pickling cannot import, in stock torch.fx graphs too, and
the save/load column would measure that instead of the guards.)
"""

import contextlib
import copy
import dataclasses
import inspect
import io
import pathlib
import sys
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

import specfx
from tools.peers.consumer_passes import keep_used_nodes, remove_graph_asserts

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guarantees.md"
BEGIN, END = "<!-- begin: python -m tools.peers.guard_matrix -->", "<!-- end: python -m tools.peers.guard_matrix -->"

ALL = specfx.Policy(iter=True, bool=True, shapes=True, scalars=True)
BOOL = specfx.Policy(bool=True)


# -- the cases -------------------------------------------------------------------------------------


class Router(nn.Module):
    """A user's leaf module whose output dict has input-dependent keys."""

    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"pos": x} if x.sum() > 0 else {"neg": x}


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.router = Router()


class Subclass(torch.Tensor):
    """A tensor subclass an input may be."""


def traced_path(y: torch.Tensor) -> torch.Tensor:
    return y * 2 + 1


def other_path(y: torch.Tensor) -> torch.Tensor:
    return y - 3


Call = Tuple[tuple, dict, Optional[Callable[[], Any]]]  # args, kwargs, a context to call under


def call(*args: Any, under: Optional[Callable[[], Any]] = None, **kwargs: Any) -> Call:
    return args, kwargs, under


class Case:
    """One decision: its kind, the model's forward, the policy, a same-path and a breaking call."""

    def __init__(self, name: str, kind: str, forward: Callable[..., Any], policy: Any,
                 same: Callable[[], Call], broken: Callable[[], Call], **options: Any) -> None:
        self.name, self.kind, self.forward, self.policy = name, kind, forward, policy
        self.same, self.broken, self.options = same, broken, options

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        return type(f"Case_{self.name.replace('-', '_')}", (Base,), {"forward": self.forward})().eval()


CASES: List[Case] = []


def case(name: str, kind: str, policy: Any, same: Callable[[], Call], broken: Callable[[], Call],
         **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(forward: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(name, kind, forward, policy, same, broken, **options))
        return forward
    return register


def x23() -> torch.Tensor:
    return torch.randn(2, 3)


def _with_attribute() -> torch.Tensor:
    tensor = x23()
    tensor.foo = 1  # type: ignore[attr-defined]
    return tensor


@case("iter", "iter", ALL, lambda: call(x23()), lambda: call(torch.randn(3, 3)))
def _iter(self: Base, x: torch.Tensor) -> torch.Tensor:
    total = 0
    for row in x:
        total = total + row
    return self.lin(x) + total


@case("unpack", "unpack", ALL, lambda: call(torch.randn(4, 3)), lambda: call(torch.randn(6, 3)))
def _unpack(self: Base, x: torch.Tensor) -> torch.Tensor:
    a, b = x.split(2)
    return self.lin(a) + b


@case("len", "len", ALL, lambda: call(x23()), lambda: call(torch.randn(3, 3)))
def _len(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if len(x) == 2 else other_path(self.lin(x))


@case("bool: data", "bool", BOOL, lambda: call(torch.rand(2, 3) + 1), lambda: call(-torch.rand(2, 3) - 1))
def _bool_data(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.sum() > 0 else other_path(self.lin(x))


@case("bool: shape", "bool", BOOL, lambda: call(torch.randn(3, 3)), lambda: call(x23()))
def _bool_shape(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.shape[0] > 2 else other_path(self.lin(x))


@case("bool: contiguity", "bool", ALL, lambda: call(x23()), lambda: call(torch.randn(3, 2).t()))
def _bool_contiguous(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.is_contiguous() else other_path(self.lin(x))


@case("bool: stride", "bool", ALL, lambda: call(x23()), lambda: call(torch.randn(3, 2).t()))
def _bool_stride(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.stride(0) == 3 else other_path(self.lin(x))


@case("bool: memory format", "bool", ALL, lambda: call(torch.randn(2, 3, 4, 4)),
      lambda: call(torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)))
def _bool_memory_format(self: Base, x: torch.Tensor) -> torch.Tensor:
    y = self.lin(x.transpose(1, 3))
    return other_path(y) if x.is_contiguous(memory_format=torch.channels_last) else traced_path(y)


@case("shape", "shape", ALL, lambda: call(x23()), lambda: call(torch.randn(4, 3)))
def _shape(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.shape == (2, 3) else other_path(self.lin(x))


@case("size", "size", ALL, lambda: call(x23()), lambda: call(torch.randn(4, 3)))
def _size(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.size(0) == 2 else other_path(self.lin(x))


@case("ndim", "ndim", ALL, lambda: call(x23()), lambda: call(torch.randn(2, 2, 3)))
def _ndim(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.dim() == 2 else other_path(self.lin(x))


@case("numel", "numel", ALL, lambda: call(x23()), lambda: call(torch.randn(4, 3)))
def _numel(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.numel() == 6 else other_path(self.lin(x))


def _twos() -> Call:
    return call(torch.full((2, 3), 2.0))


def _threes() -> Call:
    return call(torch.full((2, 3), 3.0))


@case("int", "int", ALL, _twos, _threes)
def _int(self: Base, x: torch.Tensor) -> torch.Tensor:
    return self.lin(x) * int(x.max())


def _peak_at(position: int) -> Call:
    x = torch.rand(2, 3) * 0.5
    x[0, position] = 1.0
    return call(x)


@case("index", "index", ALL, lambda: _peak_at(1), lambda: _peak_at(2))
def _index(self: Base, x: torch.Tensor) -> torch.Tensor:
    return self.lin(x) * [1.0, 2.0, 3.0, 4.0, 5.0, 6.0][x.argmax()]


@case("float", "float", ALL, _twos, _threes)
def _float(self: Base, x: torch.Tensor) -> torch.Tensor:
    return self.lin(x) * float(x.max())


@case("item", "item", ALL, _twos, _threes)
def _item(self: Base, x: torch.Tensor) -> torch.Tensor:
    return self.lin(x) * x.max().item()


@case("tolist", "tolist", ALL, _twos, _threes)
def _tolist(self: Base, x: torch.Tensor) -> torch.Tensor:
    return self.lin(x) * x[0].tolist()[1]


@case("keys", "keys", ALL, lambda: call(torch.rand(2, 3)), lambda: call(-torch.rand(2, 3)), leaf_modules=[Router])
def _keys(self: Base, x: torch.Tensor) -> torch.Tensor:
    names = [key for key in self.router(x)]
    return traced_path(self.lin(x)) if names == ["pos"] else other_path(self.lin(x))


@case("dtype", "dtype", ALL, lambda: call(x23()), lambda: call(x23().double()))
def _dtype(self: Base, x: torch.Tensor) -> torch.Tensor:
    y = self.lin(x.float())
    return traced_path(y) if x.dtype == torch.float32 else other_path(y)


@case("device", "device", ALL, lambda: call(x23()), lambda: call(x23().to("meta")))
def _device(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(x) if x.device.type == "cpu" else other_path(x)


@case("layout", "layout", ALL, lambda: call(x23()), lambda: call(x23().to_sparse()))
def _layout(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if x.layout == torch.strided else other_path(self.lin(x.to_dense()))


@case("is None: keyword", "is_none", ALL, lambda: call(x23()), lambda: call(x23(), mask=torch.ones(2, 3)))
def _is_none_keyword(self: Base, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    return traced_path(self.lin(x)) if mask is None else other_path(self.lin(x) * mask)


@case("is None: positional", "is_none", ALL, lambda: call(x23(), None), lambda: call(x23(), torch.ones(2, 3)))
def _is_none_positional(self: Base, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    return traced_path(self.lin(x)) if mask is None else other_path(self.lin(x) * mask)


@case("type: isinstance Tensor", "type", ALL, lambda: call(x23(), torch.tensor(2.0)), lambda: call(x23(), 2.0))
def _type_tensor(self: Base, x: torch.Tensor, s: Any) -> torch.Tensor:
    return traced_path(self.lin(x) * s) if isinstance(s, torch.Tensor) else other_path(self.lin(x) * s)


@case("type: torch.is_tensor", "type", ALL, lambda: call(x23(), torch.tensor(2.0)), lambda: call(x23(), 2.0))
def _type_is_tensor(self: Base, x: torch.Tensor, s: Any) -> torch.Tensor:
    return traced_path(self.lin(x) * s) if torch.is_tensor(s) else other_path(self.lin(x) * s)


@case("type: Parameter", "type", ALL, lambda: call(x23()), lambda: call(nn.Parameter(x23(), requires_grad=False)))
def _type_parameter(self: Base, x: torch.Tensor) -> torch.Tensor:
    return other_path(self.lin(x)) if isinstance(x, nn.Parameter) else traced_path(self.lin(x))


@case("type: subclass", "type", ALL, lambda: call(x23()), lambda: call(x23().as_subclass(Subclass)))
def _type_subclass(self: Base, x: torch.Tensor) -> torch.Tensor:
    return other_path(self.lin(x)) if isinstance(x, Subclass) else traced_path(self.lin(x))


@case("value: str", "value", ALL, lambda: call(x23(), "a"), lambda: call(x23(), "b"))
def _value_str(self: Base, x: torch.Tensor, mode: str) -> torch.Tensor:
    return traced_path(self.lin(x)) if mode == "a" else other_path(self.lin(x))


@case("value: requires_grad", "value", ALL, lambda: call(x23()), lambda: call(x23().requires_grad_()))
def _value_requires_grad(self: Base, x: torch.Tensor) -> torch.Tensor:
    return other_path(self.lin(x)) if x.requires_grad else traced_path(self.lin(x))


@case("value: autocast", "value", ALL, lambda: call(x23()),
      lambda: call(x23(), under=lambda: torch.autocast("cpu", dtype=torch.bfloat16)))
def _value_autocast(self: Base, x: torch.Tensor) -> torch.Tensor:
    return other_path(self.lin(x)) if torch.is_autocast_enabled("cpu") else traced_path(self.lin(x))


@case("grad mode", "grad_enabled", ALL, lambda: call(x23()), lambda: call(x23(), under=torch.no_grad))
def _grad_mode(self: Base, x: torch.Tensor) -> torch.Tensor:
    return traced_path(self.lin(x)) if torch.is_grad_enabled() else other_path(self.lin(x))


@case("hasattr", "has_attr", ALL, lambda: call(x23()), lambda: call(_with_attribute()))
def _hasattr(self: Base, x: torch.Tensor) -> torch.Tensor:
    return other_path(self.lin(x)) if hasattr(x, "foo") else traced_path(self.lin(x))


@case("try/except mark", "caught", ALL, lambda: call(torch.randn(2, 6)), lambda: call(torch.randn(2, 5)))
def _try_except(self: Base, x: torch.Tensor) -> torch.Tensor:
    try:
        y = x.view(-1, 3)
    except RuntimeError:
        y = x[:, :3]
    return self.lin(y)


@case("entry structure", "structure", ALL, lambda: call({"a": x23(), "b": x23()}), lambda: call({"a": x23()}))
def _entry_structure(self: Base, inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
    return traced_path(self.lin(sum(inputs.values())))


# -- the tools ---------------------------------------------------------------------------------------


def _bound(gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> list:
    bound = inspect.signature(gm.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())


def _interpreter(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Callable:
    return lambda *a, **k: torch.fx.Interpreter(gm).run(*_bound(gm, a, k))


def _saved_and_loaded(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def _compiled(backend: str) -> Callable[..., Any]:
    def apply(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
        torch._dynamo.reset()
        return torch.compile(gm, backend=backend)
    return apply


def _exported(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    return specfx.export(model, args, kwargs or None, policy=c.policy, **c.options)


# Observers: min/max, not the default histograms (whose search costs a second per
# observer, the matrix's largest cost). One calibration input is all a cell needs.
def _fx_quantized(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    from torch.ao.quantization import QConfigMapping, default_qconfig

    from specfx.quantize_fx import convert_fx, prepare_fx

    prepared = prepare_fx(gm, QConfigMapping().set_global(default_qconfig), args)
    prepared(*args, **kwargs)
    return convert_fx(prepared)


def _pt2e_quantized(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    config = xiq.get_default_x86_inductor_quantization_config()
    min_max = dataclasses.replace(config.input_activation, observer_or_fake_quant_ctr=MinMaxObserver)
    config = dataclasses.replace(config, input_activation=min_max, output_activation=min_max
                                 if config.output_activation is not None else None)
    quantizer = xiq.X86InductorQuantizer().set_global(config)
    prepared = prepare_pt2e(_exported(c, model, gm, args, kwargs).module(), quantizer)
    prepared(*args, **kwargs)
    return convert_pt2e(prepared)


def _brevitas_retraced(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    import specfx.brevitas  # noqa: F401 - Brevitas' fx copy keeps the guards
    from brevitas.graph.quantize import preprocess_for_quantize

    return preprocess_for_quantize(copy.deepcopy(gm))  # re-traces with Brevitas' tracer


def _unused_deleted(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    """Sony MCT's view: the graph re-traced, every node no output depends on deleted."""
    return keep_used_nodes(copy.deepcopy(gm))


def _asserts_removed(c: Case, model: nn.Module, gm: torch.fx.GraphModule, args: tuple, kwargs: dict) -> Any:
    """ExecuTorch's view: the exported program's assertion ops erased, as to_executorch() does."""
    return remove_graph_asserts(_exported(c, model, gm, args, kwargs).module())


Tool = Callable[[Case, nn.Module, torch.fx.GraphModule, tuple, dict], Any]
TOOLS: Dict[str, Tool] = {
    "graph": lambda c, model, gm, a, k: gm,
    "deepcopy": lambda c, model, gm, a, k: copy.deepcopy(gm),
    "save/load": _saved_and_loaded,
    "symbolic_trace(gm)": lambda c, model, gm, a, k: torch.fx.symbolic_trace(gm),
    "specfx.trace(gm)": lambda c, model, gm, a, k: specfx.trace(gm, a, k or None, policy=c.policy),
    "Interpreter": _interpreter,
    "compile (eager)": _compiled("eager"),
    "compile (inductor)": _compiled("inductor"),
    "export().module()": lambda c, model, gm, a, k: _exported(c, model, gm, a, k).module(),
    "quantize_fx": _fx_quantized,
    "PT2E": _pt2e_quantized,
    "Brevitas re-trace": _brevitas_retraced,
    "unused nodes deleted": _unused_deleted,
    "asserts removed": _asserts_removed,
}
QUANTIZED = frozenset({"quantize_fx", "PT2E"})


# -- a cell --------------------------------------------------------------------------------------------

SOUND = ("raises", "fails", "equal", "refuses")
VERDICTS = {
    "raises": "✓ raises",     # the breaking input raises specfx's error
    "fails": "✓ fails",       # the program's data-flow check fails the call (no assertion left to word it)
    "equal": "✓ eager",       # the breaking input gives eager's result
    "refuses": "✓ refuses",   # the tool refuses when applied, in specfx's words
    "silent": "✗ silent",     # a result that is not eager's, without a word
    "error": "✗ error",       # another error than specfx's
    "crash": "✗ crash",       # the tool or the same-path input fails
}


def _value(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return (output.to_dense() if output.layout != torch.strided else output).detach()
    return output


def _close(got: Any, want: Any, tool: str) -> bool:
    got, want = _value(got), _value(want)
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        return bool(got == want)
    if "meta" in (got.device.type, want.device.type):
        return got.shape == want.shape and got.device == want.device
    if got.shape != want.shape:
        return False
    got, want = got.float(), want.float()
    if tool in QUANTIZED or want.dtype == torch.bfloat16:
        return bool((got - want).norm() <= 0.1 * want.norm() + 1e-3)
    return torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def _run(fn: Callable[..., Any], made: Call) -> Any:
    args, kwargs, under = made
    with under() if under is not None else contextlib.nullcontext():
        return fn(*args, **kwargs)


def _specfx_error(error: BaseException) -> bool:
    return isinstance(error, specfx.SpecfxError) or "specfx guard failed" in str(error)


def _flow_check_failed(error: BaseException) -> bool:
    """specfx.guarded's out-of-range index_select (an exported program whose assertions were erased)."""
    return isinstance(error, IndexError) and "index out of range" in str(error) and any(
        frame.name == "forward" and "index_select" in (frame.line or "")
        for frame in traceback.extract_tb(error.__traceback__))


def measure(c: Case, tool: str) -> Tuple[str, str]:
    """(verdict, what happened) of one cell."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecations of torch.ao, Brevitas' notices, decisions' warnings
        return _measure(c, tool)


def _measure(c: Case, tool: str) -> Tuple[str, str]:
    model = c.model()
    same, broken = c.same(), c.broken()
    args, kwargs, _ = same
    gm = specfx.trace(model, args, kwargs or None, policy=c.policy, **c.options)
    try:
        applied = TOOLS[tool](c, model, gm, args, kwargs)
    except Exception as error:
        # (a refusal is specfx's SpecializationError; a guard failing while the tool runs is a crash)
        verdict = "refuses" if isinstance(error, specfx.SpecializationError) else "crash"
        return verdict, f"when applied: {type(error).__name__}: {error}"
    try:
        got = _run(applied, same)
    except Exception as error:
        return "crash", f"same-path input: {type(error).__name__}: {error}"
    if not _close(got, _run(model, same), tool):
        return "silent", "same-path input: not eager's result"
    try:
        want: Any = _run(model, broken)
    except Exception as error:  # (eager itself refuses: a, b = three pieces)
        want = error
    try:
        got = _run(applied, broken)
    except Exception as error:
        if _specfx_error(error):
            return "raises", f"{type(error).__name__}: {error}"
        if _flow_check_failed(error):
            return "fails", f"{type(error).__name__}: {error}"
        return "error", f"breaking input: {type(error).__name__}: {error}"
    if not isinstance(want, Exception) and _close(got, want, tool):
        return "equal", "breaking input: eager's result"
    return "silent", "breaking input: a result that is not eager's, without an error"


# -- what every cell does today (tests/test_guard_matrix.py measures each) -----------------------------

# cells whose verdict is not "raises"; a ✗ here is a known gap, said in docs/guarantees.md
EXPECTED_OTHERWISE: Dict[Tuple[str, str], str] = {
    ("keys", "export().module()"): "refuses",  # torch.export traces the leaf, which branches on data
    ("keys", "PT2E"): "refuses",
    ("try/except mark", "Interpreter"): "error",  # runs the nodes one by one: the op's own error
    ("try/except mark", "Brevitas re-trace"): "refuses",  # its fx copy cannot keep the handler
    ("keys", "asserts removed"): "refuses",  # (export refuses, as above)
    # a data or size decision of an exported program is an assertion; erased (as ExecuTorch erases
    # it), its condition still feeds the output (specfx.guarded), whose out-of-range index fails the call
    **{(name, "asserts removed"): "fails" for name in (
        "iter", "len", "bool: data", "bool: shape", "bool: stride", "int", "index", "float", "item", "tolist")},
}


def expected(case_name: str, tool: str) -> str:
    return EXPECTED_OTHERWISE.get((case_name, tool), "raises")


def render(verdict: Callable[[str, str], str] = expected) -> str:
    """The markdown table: a row per case, a column per tool."""
    tools = list(TOOLS)
    lines = ["| decision (guard kind) | " + " | ".join(tools) + " |",
             "|---|" + "---|" * len(tools)]
    for c in CASES:
        cells = [VERDICTS[verdict(c.name, tool)] for tool in tools]
        lines.append(f"| {c.name} (`{c.kind}`) | " + " | ".join(cells) + " |")
    counts = {mark: 0 for mark in VERDICTS}
    for c in CASES:
        for tool in tools:
            counts[verdict(c.name, tool)] += 1
    total = len(CASES) * len(tools)
    sound = sum(counts[v] for v in SOUND)
    summary = ", ".join(f"{n} {VERDICTS[v]}" for v, n in counts.items() if n)
    return "\n".join(lines) + f"\n\n{sound} of {total} cells sound ({summary}).\n"


def _page_table() -> str:
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n") + "\n"


def main(argv: List[str]) -> int:
    if "--check" in argv:
        return 0 if _page_table() == render() else 1
    measured = {(c.name, tool): measure(c, tool)[0] for c in CASES for tool in TOOLS}
    table = render(lambda name, tool: measured[(name, tool)])
    print(table)
    if "--write" in argv:
        text = DOC.read_text()
        start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
        DOC.write_text(text[:start] + "\n" + table + text[stop:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
