"""Calls in a traced graph that any tracer can trace again.

Re-tracing a GraphModule runs its generated code with proxies for the inputs:
unpickling does, and so do ``torch.fx.symbolic_trace(gm)``, FX quantization's
``prepare_fx`` and Brevitas. A stock ``torch.fx.Tracer`` proxies parameters but
not buffers or tensor constants, so where specfx traced a buffer sliced by a
traced size (``self.position_ids[:, :seq_len]``, in most transformers encoders)
the re-trace evaluates ``real_tensor[:, :proxy]``, and torch asks the proxy for
an int; so does a method of a value computed from buffers alone
(``inv_freq[None, :, None].float().expand(batch, -1, 1)``). A factory given traced
sizes (``torch.zeros(batch, seq)``) fails the same way: torch's argument parser
only hands tensors to ``__torch_function__``.

So :func:`retraceable` rewrites such calls, after a trace, into calls of the
functions below. Each runs the op when given values, and when any argument
holds a proxy (torch.fx's or another FX copy's, such as Brevitas') it records
itself as a node of that proxy's tracer instead, as ``torch.fx.wrap``'d
functions do, without joining fx's process-wide wrap table. specfx's own
re-trace (unpickling, ``specfx.trace(gm)``) proxies buffers and reproduces the
graph node for node; a stock tracer records the same calls, computing once what
depends on buffers alone (as torch.fx always does with buffers), and a real
tensor handed to a recording becomes that tracer's own ``get_attr``. Everything
else (a call with a traced tensor among its arguments, which torch dispatches to
the proxy) stays a plain call.

Generated code imports these functions from ``specfx`` (``specfx_getitem``,
``specfx_call_method``, ``specfx_call_function('zeros', ...)``), so saved graphs name
a stable path.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Dict, Optional, Set, Tuple

import torch
import torch.fx.passes.shape_prop
from torch.fx.node import map_aggregate
from torch.fx.proxy import Proxy

from ..guards import _is_foreign_proxy

__all__ = ["anchor_tracer", "call_function", "call_method", "getitem", "grad_enabled", "keep_leaves", "retraceable"]


def _tracer_of(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """The tracer of the first proxy anywhere in the arguments (slices included), or None."""
    found: list[Any] = []

    def visit(a: Any) -> Any:
        if not found and not isinstance(a, torch.Tensor) and (isinstance(a, Proxy) or _is_foreign_proxy(a)):
            found.append(a.tracer)
        return a

    map_aggregate((args, kwargs), visit)
    return found[0] if found else None


def getitem(obj: Any, index: Any) -> Any:
    """``obj[index]``, recorded as a node when ``index`` holds a traced value."""
    tracer = _tracer_of((obj, index), {})
    if tracer is not None:
        return tracer.create_proxy("call_function", getitem, (obj, index), {}, name="getitem")
    return obj[index]


def call_method(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.method(*args, **kwargs)``, recorded as a node (named after the method)
    when an argument holds a traced value."""
    tracer = _tracer_of((obj, *args), kwargs)
    if tracer is not None:
        return tracer.create_proxy("call_function", call_method, (obj, method, *args), kwargs, name=method)
    return getattr(obj, method)(*args, **kwargs)


def call_function(function: str, *args: Any, **kwargs: Any) -> Any:
    """``torch.<function>(*args, **kwargs)`` (``function`` names it under ``torch``:
    ``"zeros"``, ``"nn.functional.pad"``), recorded as a node (named after it) when
    an argument holds a traced value."""
    tracer = _tracer_of(args, kwargs)
    if tracer is not None:
        name = function.rpartition(".")[2]
        return tracer.create_proxy("call_function", call_function, (function, *args), kwargs, name=name)
    return _torch_function(function)(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _torch_function(function: str) -> Callable[..., Any]:
    found: Any = functools.reduce(getattr, function.split("."), torch)  # (typed as a module)
    return found


def anchor_tracer(anchor: Any) -> Any:
    """The tracer re-tracing a graph when ``anchor`` (an input of the graph that an ambient
    read such as :func:`grad_enabled` takes) is one of its proxies, else None."""
    if anchor is None or isinstance(anchor, torch.Tensor):
        return None
    if isinstance(anchor, Proxy) or _is_foreign_proxy(anchor):
        return anchor.tracer
    return None


def grad_enabled(anchor: Any = None) -> bool:
    """``torch.is_grad_enabled()`` as a specfx graph reads it for its grad-mode guard.
    ``anchor`` is the graph's first input and is not read: re-traced by any tracer
    (``symbolic_trace(gm)``, unpickling, FX quantization, Brevitas) it is that tracer's proxy,
    so the call records itself and the guard after it stays in the new graph; a plain
    ``torch.is_grad_enabled()`` would answer the re-trace's own grad mode, once."""
    tracer = anchor_tracer(anchor)
    if tracer is not None:
        return tracer.create_proxy("call_function", grad_enabled, (anchor,), {})
    return torch._C.is_grad_enabled()


def keep_leaves(tracer: Any) -> None:
    """Another tracer re-traces a specfx graph (``tracer.root``): the submodules the graph
    calls stay leaves. A stock tracer would trace into a user's module that specfx kept as
    a leaf (``leaf_modules=``) and fail at its data-dependent code, or record it without its
    guards. Only this tracer object changes, for the trace it is doing."""
    graph = getattr(getattr(tracer, "root", None), "graph", None)
    if not isinstance(graph, torch.fx.Graph) or "is_leaf_module" in vars(tracer):
        return
    called = frozenset(str(node.target) for node in graph.nodes if node.op == "call_module")
    if not called:
        return
    decide = tracer.is_leaf_module

    def is_leaf_module(module: torch.nn.Module, qualified_name: str) -> bool:
        return qualified_name in called or bool(decide(module, qualified_name))

    tracer.is_leaf_module = is_leaf_module


for _function in (getitem, call_method, call_function, grad_enabled):
    _function.__module__ = "specfx"  # generated code and pickles import them from the package


def _attribute_tensor(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """A ``get_attr`` of a tensor that is not a parameter (a buffer, a constant)."""
    try:
        value = operator.attrgetter(str(node.target))(gm)
    except AttributeError:
        return False
    return isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)


def _may_be_tensor(node: torch.fx.Node) -> bool:
    kind = node.meta.get("type")  # (a node traced without a value may be anything)
    return "tensor_meta" in node.meta or not isinstance(kind, type) or issubclass(kind, torch.Tensor)


def _needs_recording(node: torch.fx.Node, untraced: Set[torch.fx.Node]) -> Optional[Tuple[Any, Tuple[Any, ...]]]:
    """The (target, args) that make ``node`` re-traceable, or None when it already is.

    ``untraced`` are the nodes a stock tracer computes as real values (buffers, and
    what is computed from them alone). Only calls that make a tensor are candidates
    (a global-state call such as ``_set_grad_enabled`` keeps torch.fx's behaviour):
    those whose traced inputs are all non-tensors (sizes, slice bounds, scalars) and
    which torch does not hand to ``__torch_function__`` (see :func:`_fails_in_stock_trace`)."""
    if "tensor_meta" not in node.meta:
        return None
    proxied = False
    for n in node.all_input_nodes:  # (most calls take a tensor: the first one ends the check)
        if n not in untraced:
            if _may_be_tensor(n):
                return None
            proxied = True
    if not proxied:
        return None
    subject = node.args[0] if node.args else None
    if node.op == "call_method":
        # (a proxy subject's method records itself)
        rewritten: Tuple[Any, Tuple[Any, ...]] = (call_method, (subject, node.target, *node.args[1:]))
        if subject not in untraced:
            return None
    elif node.op != "call_function":
        return None
    elif node.target is operator.getitem:
        if subject not in untraced:
            return None
        rewritten = (getitem, tuple(node.args))
    else:
        name = _qualified_name(node.target)
        if not (name.startswith("torch.") and _resolves(name[len("torch."):], node.target)):
            return None
        rewritten = (call_function, (name[len("torch."):], *node.args))
    return rewritten if _fails_in_stock_trace(node, untraced) else None


def _fails_in_stock_trace(node: torch.fx.Node, untraced: Set[torch.fx.Node]) -> bool:
    """Whether torch refuses ``node``'s call when a stock tracer re-traces it: tried
    with torch.fx proxies (in a throwaway graph) for the traced inputs and meta tensors
    for the untraced ones. torch hands a proxy passed as an argument of its own to
    ``__torch_function__``, but not one inside a tuple, a list or a slice
    (``buffer[:, :n]``, ``torch.full((b, n), 0.0)``), nor sizes given one by one
    (``torch.zeros(b, n)``, ``buffer.expand(b, -1)``)."""
    tracer = torch.fx.proxy.GraphAppendingTracer(torch.fx.Graph())

    def stand_in(n: torch.fx.Node) -> Any:
        if n not in untraced:
            return torch.fx.Proxy(tracer.graph.placeholder(n.name), tracer)
        meta = n.meta.get("tensor_meta")
        if not isinstance(meta, torch.fx.passes.shape_prop.TensorMetadata):
            raise LookupError(n.name)  # an untraced non-tensor: its value is not at hand
        return torch.empty(meta.shape, dtype=meta.dtype, device="meta")

    try:
        args = torch.fx.node.map_arg(node.args, stand_in)
        kwargs = torch.fx.node.map_arg(node.kwargs, stand_in)
        if node.op == "call_method":
            getattr(args[0], str(node.target))(*args[1:], **kwargs)
        else:
            node.target(*args, **kwargs)  # type: ignore[operator]
    except Exception:  # any refusal (a TypeError from the argument parser, above all)
        return True
    return False


def _qualified_name(target: Any) -> str:
    try:
        return torch.fx.node._get_qualified_name(target) if callable(target) else ""
    except (RuntimeError, AttributeError):  # (a callable torch.fx cannot name is not torch's)
        return ""


def _resolves(function: str, target: Any) -> bool:
    try:
        return _torch_function(function) is target
    except AttributeError:
        return False


def retraceable(gm: torch.fx.GraphModule) -> None:
    """Rewrite, in place, the calls of ``gm`` that a stock tracer could not trace again
    (see the module docstring); node names, metadata and order are kept."""
    untraced: Set[torch.fx.Node] = set()
    changed = False
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            if _attribute_tensor(gm, node):
                untraced.add(node)
            continue
        rewritten = _needs_recording(node, untraced)
        if rewritten is not None:
            node.op, node.target = "call_function", rewritten[0]
            node.args = rewritten[1]
            changed = True
        elif (untraced and node.op in ("call_function", "call_method") and node.all_input_nodes
              and all(n in untraced for n in node.all_input_nodes)):
            untraced.add(node)  # computed from buffers alone: a stock tracer runs it for real
    if changed:
        gm.recompile()
