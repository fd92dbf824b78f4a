"""What tracing HuggingFace transformers needs beyond torch.fx, used only when
transformers itself is imported (no dependency on it).

transformers builds its 4-D attention masks by applying ``torch.vmap`` four
times to a *mask function* of ``(batch_idx, head_idx, q_idx, kv_idx)``
(``masking_utils._vmap_for_bhqkv``). No FX tracer can record ``vmap``. Those
mask functions are elementwise by contract (they also serve as flex-attention
``mask_mod``s): comparisons, arithmetic, ``&``/``|`` and indexing of a captured
tensor by the index arguments. For such a function, vmapping over the four
index ranges equals calling it once on the ranges shaped to broadcast against
each other — ``(B,1,1,1)``, ``(1,H,1,1)``, ``(1,1,Q,1)``, ``(1,1,1,KV)`` — and
expanding the result to ``(B, H, Q, KV)``: ordinary tensor operations that
trace. While a trace runs, ``_vmap_for_bhqkv`` returns that broadcasting form
to the tracing code; any other caller, thread or eager run gets transformers'
own (``specfx._capture.patches``). transformers 5 spells the same expansion
``masking_utils._vmap_expansion_sdpa(mask_function)``; it is answered the same way, so
composed mask functions (``and_masks``/``or_masks`` of causal, padding, sliding-window and
token-type functions, as Gemma3 builds them) broadcast like the plain ones.

transformers 5's ``torch_compilable_check(cond, f"...")`` formats its message on every call;
the text is registered as a message (``_frames/message_flow.py``), so formatting a traced
value there is no decision: the check becomes a graph assertion (``checks.py``) whose
message the graph formats from the run-time values.

transformers 5 collects ``output_hidden_states``/``output_attentions`` through forward hooks
that its ``capture_outputs`` decorator activates (``utils/output_capturing.py``). A layer that
is a leaf of the trace (llm-compressor's decoder and vision layers) runs once with the
example values to give its output a value: its hooks would collect those concrete tensors,
which the traced code then reads as constants (LLaVA's vision features baked into the
graph). While a trace runs, the collector answers "inactive" to hooks run for a value, and
:func:`capture_leaf_outputs` runs the collecting hooks of a leaf on its traced arguments and
output, as eager runs them on the real ones.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Optional, Tuple

import torch

from .._frames.message_flow import GRAPH, register_message_function
from . import patches as _patches

__all__ = ["capture_leaf_outputs", "install_transformers_support"]


def _broadcast_for_bhqkv(mask_function: Callable[..., Any], bh_indices: bool = True) -> Callable[..., Any]:
    """``_vmap_for_bhqkv(mask_function, bh_indices)`` computed by broadcasting."""

    def mask(batch_idx: Optional[torch.Tensor], head_idx: Optional[torch.Tensor], q_idx: torch.Tensor,
             kv_idx: torch.Tensor) -> torch.Tensor:
        q, kv = q_idx[:, None], kv_idx[None, :]
        if not bh_indices:
            return mask_function(batch_idx, head_idx, q, kv).expand(q_idx.shape[0], kv_idx.shape[0])
        assert batch_idx is not None and head_idx is not None  # transformers passes both ranges here
        result = mask_function(batch_idx[:, None, None, None], head_idx[None, :, None, None], q[None, None],
                               kv[None, None])
        return result.expand(batch_idx.shape[0], head_idx.shape[0], q_idx.shape[0], kv_idx.shape[0])

    return mask


def _collecting_hook_code() -> Optional[types.CodeType]:
    """The code of transformers' output-collecting forward hook (a closure made per module)."""
    output_capturing = sys.modules.get("transformers.utils.output_capturing")
    install = getattr(output_capturing, "install_output_capuring_hook", None)
    for constant in getattr(getattr(install, "__code__", None), "co_consts", ()):
        if isinstance(constant, types.CodeType) and constant.co_name == "output_capturing_hook":
            return constant
    return None


def capture_leaf_outputs(module: torch.nn.Module, args: Tuple[Any, ...], output: Any) -> None:
    """Run transformers' output-collecting hooks of ``module`` (a leaf just traced) on its
    traced ``args`` and ``output``, so that the layer outputs its caller collects are traced values."""
    if not module._forward_hooks:
        return
    code = _collecting_hook_code()
    if code is None:
        return
    for hook in list(module._forward_hooks.values()):
        if getattr(hook, "__code__", None) is code:
            hook(module, args, output)


def _install_output_capture(is_evaluating: Callable[[], bool]) -> None:
    output_capturing = sys.modules.get("transformers.utils.output_capturing")
    collector = getattr(output_capturing, "_active_collector", None)
    if collector is None or not hasattr(type(collector), "get"):
        return
    owner = type(collector)
    original = _patches.previous(owner, "get")

    def get(self: Any) -> Any:
        if self is collector and is_evaluating():
            return None  # (a leaf run for its value: its hooks collect nothing, capture_leaf_outputs does)
        return original(self)

    _patches.patch(owner, "get", get)


def install_transformers_support(is_tracing: Callable[[], bool], is_evaluating: Callable[[], bool]) -> None:
    """In the current ``_patches.tracing()`` session: transformers' vmapped mask builders
    in their broadcasting form while ``is_tracing()``, its check function's messages known as
    messages, its output collector inactive while ``is_evaluating()`` (a leaf run for its
    value); nothing when transformers was never imported."""
    _install_output_capture(is_evaluating)
    import_utils = sys.modules.get("transformers.utils.import_utils")
    check = getattr(import_utils, "torch_compilable_check", None)
    if check is not None:
        register_message_function(check, GRAPH)  # (its condition becomes a graph assertion: checks.py)
    masking_utils = sys.modules.get("transformers.masking_utils")
    if masking_utils is None:
        return
    if hasattr(masking_utils, "_vmap_for_bhqkv"):  # transformers 4
        original = _patches.previous(masking_utils, "_vmap_for_bhqkv")

        def vmap_for_bhqkv(mask_function: Callable[..., Any], bh_indices: bool = True) -> Callable[..., Any]:
            if is_tracing():
                return _broadcast_for_bhqkv(mask_function, bh_indices)
            return original(mask_function, bh_indices)

        _patches.patch(masking_utils, "_vmap_for_bhqkv", vmap_for_bhqkv)
    if hasattr(masking_utils, "_vmap_expansion_sdpa"):  # transformers 5
        expansion = _patches.previous(masking_utils, "_vmap_expansion_sdpa")

        def vmap_expansion_sdpa(mask_function: Callable[..., Any]) -> Callable[..., Any]:
            if is_tracing():
                return _broadcast_for_bhqkv(mask_function)
            return expansion(mask_function)

        _patches.patch(masking_utils, "_vmap_expansion_sdpa", vmap_expansion_sdpa)
