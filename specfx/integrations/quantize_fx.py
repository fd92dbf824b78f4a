"""FX graph-mode quantization of specfx graphs (``torch.ao.quantization.quantize_fx``,
deprecated upstream: prefer PT2E through :func:`specfx.export`).

``torch.ao.quantization.quantize_fx.prepare_fx`` re-traces its input with a stock tracer
(specfx graphs re-trace node for node, see ``specfx/_graph/retrace.py``), but it may observe
values that are not float tensors (``torch.Size`` arithmetic, integer routing indices),
and its re-trace drops the structured entry check and the records. :func:`prepare_fx`
prepares the specfx graph as it is: no re-trace, the traced values say which nodes are
float tensors, and the graph keeps its signature, entry check, records and output types.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx

from ..guards import GUARD_FUNCTIONS
from .._graph.records import RECORDS, keep_records

__all__ = ["convert_fx", "prepare_fx"]

_NOT_A_FLOAT_TENSOR = "specfx: not a float tensor"


def prepare_fx(
    gm: torch.fx.GraphModule,
    qconfig_mapping: Any,
    example_inputs: Tuple[Any, ...],
    prepare_custom_config: Any = None,
    backend_config: Any = None,
    *,
    is_qat: bool = False,
) -> torch.fx.GraphModule:
    """``torch.ao.quantization.quantize_fx.prepare_fx`` for a graph traced by specfx:
    inserts observers into a copy of ``gm`` without re-tracing it, observes only float
    tensors (never sizes or integer tensors), and keeps the graph's guards, records,
    signature and output types. Calibrate the result, then :func:`convert_fx` it.

    >>> import warnings, torch, specfx
    >>> from torch.ao.quantization import get_default_qconfig_mapping
    >>> from specfx.quantize_fx import convert_fx, prepare_fx
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    >>> gm = specfx.trace(model, torch.randn(2, 4))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # torch.ao.quantization deprecation and observer notices
    ...     prepared = prepare_fx(gm, get_default_qconfig_mapping("x86"), (torch.randn(2, 4),))
    ...     _ = prepared(torch.randn(8, 4))  # calibrate
    ...     quantized = convert_fx(prepared)
    >>> quantized(torch.randn(3, 4)).shape
    torch.Size([3, 4])
    """
    from torch.ao.quantization.fx.custom_config import FuseCustomConfig, PrepareCustomConfig
    from torch.ao.quantization.fx.prepare import prepare
    from torch.ao.quantization.quantize_fx import _attach_meta_to_node_if_not_exist, _fuse_fx

    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(
            f"specfx.prepare_fx takes the GraphModule specfx.trace returned; got {type(gm).__name__}. "
            f"Trace the model first: gm = specfx.trace(model, example_inputs, policy=...)"
        )
    if prepare_custom_config is None:
        prepare_custom_config = PrepareCustomConfig()
    elif isinstance(prepare_custom_config, dict):
        prepare_custom_config = PrepareCustomConfig.from_dict(prepare_custom_config)
    graph_module = copy.deepcopy(gm)
    codegen = graph_module.graph._codegen
    preserved = {name: getattr(gm, name) for name in prepare_custom_config.preserved_attributes
                 if hasattr(gm, name)}
    _attach_meta_to_node_if_not_exist(graph_module)
    scopes = _node_scopes(graph_module, type(gm))
    marked = _mark_non_float(graph_module)
    graph_module = _fuse_fx(graph_module, is_qat,
                            FuseCustomConfig().set_preserved_attributes(list(preserved)), backend_config)
    prepared = prepare(graph_module, qconfig_mapping, is_qat, scopes, example_inputs=example_inputs,
                       prepare_custom_config=prepare_custom_config, backend_config=backend_config)
    _unobserve(prepared, marked)
    _guards_on_inputs_first(prepared.graph)
    # fusing rebuilt the graph with torch.fx's plain code generation: give back specfx's
    prepared.graph._codegen = copy.deepcopy(codegen)
    prepared.recompile()
    for name, value in preserved.items():
        setattr(prepared, name, value)
    _keep_records(gm, prepared)
    return prepared


def convert_fx(graph_module: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> torch.fx.GraphModule:
    """``torch.ao.quantization.quantize_fx.convert_fx`` (same arguments) that keeps the
    prepared specfx graph's signature, entry check, output types and records.

    >>> import specfx.quantize_fx
    >>> specfx.quantize_fx.convert_fx.__name__
    'convert_fx'
    """
    from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx

    codegen = graph_module.graph._codegen
    quantized = torch_convert_fx(graph_module, *args, **kwargs)
    _guards_on_inputs_first(quantized.graph)
    if type(quantized.graph._codegen) is not type(codegen):  # lowering rebuilt the graph
        quantized.graph._codegen = copy.deepcopy(codegen)
    quantized.recompile()
    _keep_records(graph_module, quantized)
    return quantized


def _node_scopes(gm: torch.fx.GraphModule, root_type: type) -> Dict[str, Tuple[str, type]]:
    """Node name -> (qualified name, type) of the module it was traced in, as the
    quantization tracer records it (qconfigs by module name and type match on it)."""
    scopes: Dict[str, Tuple[str, type]] = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        scopes[node.name] = list(stack.values())[-1] if stack else ("", root_type)
    return scopes


def _mark_non_float(gm: torch.fx.GraphModule) -> set:
    """Give nodes whose traced value is not a float tensor a ``val`` that prepare reads as
    "not a tensor" (it observes only nodes whose ``val`` is a FakeTensor)."""
    marked = set()
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module") or "val" in node.meta:
            continue
        traced_type: Optional[type] = node.meta.get("type")
        meta = node.meta.get("tensor_meta")
        if traced_type is None:
            continue  # no traced value (a graph re-traced without examples): prepare's own rules
        is_float = (isinstance(traced_type, type) and issubclass(traced_type, torch.Tensor)
                    and meta is not None and getattr(meta, "dtype", torch.float32).is_floating_point)
        if not is_float:
            node.meta["val"] = _NOT_A_FLOAT_TENSOR
            marked.add(node.name)
    return marked


def _unobserve(prepared: torch.fx.GraphModule, marked: set) -> None:
    """Drop observers that prepare put on values that are not float tensors (it observes the
    inputs of ops like ``view`` whatever they are: ``x.view(size[:-1] + (heads, dim))``)."""
    from torch.ao.quantization.observer import ObserverBase

    modules = dict(prepared.named_modules())
    for node in list(prepared.graph.nodes):
        if node.name in marked and node.meta.get("val") == _NOT_A_FLOAT_TENSOR:
            del node.meta["val"]
        if (node.op == "call_module" and isinstance(modules.get(node.target), ObserverBase)
                and isinstance(node.args[0], torch.fx.Node) and node.args[0].name in marked):
            node.replace_all_uses_with(node.args[0])
            prepared.graph.erase_node(node)
    prepared.delete_all_unused_submodules()


def _guards_on_inputs_first(graph: torch.fx.Graph) -> None:
    """Move the guards that read only the inputs (a layout, a dtype, a type, a size) before
    everything else: quantization puts a quantize op on an input first, and an input that
    breaks such a guard (a sparse tensor) would make that op fail in torch's words."""
    placeholders = list(graph.find_nodes(op="placeholder"))
    if not placeholders:
        return
    last = placeholders[-1]
    for node in list(graph.nodes):
        if (node.op == "call_function" and node.target in GUARD_FUNCTIONS and node.all_input_nodes
                and all(n.op == "placeholder" for n in node.all_input_nodes)):
            last.append(node)
            last = node


def _keep_records(source: torch.fx.GraphModule, target: torch.fx.GraphModule) -> None:
    for name in RECORDS:
        if name in source.__dict__:
            setattr(target, name, source.__dict__[name])
    keep_records(target)  # (so the quantized graph keeps them through deepcopy and torch.save too)
