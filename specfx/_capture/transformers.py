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
own (``specfx._capture.patches``).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch

from . import patches as _patches

__all__ = ["install_transformers_support"]


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


def install_transformers_support(is_tracing: Callable[[], bool]) -> None:
    """In the current ``_patches.tracing()`` session: transformers' vmapped mask builder
    in its broadcasting form while ``is_tracing()``; nothing when transformers was never imported."""
    masking_utils = sys.modules.get("transformers.masking_utils")
    if masking_utils is None or not hasattr(masking_utils, "_vmap_for_bhqkv"):
        return
    original = _patches.previous(masking_utils, "_vmap_for_bhqkv")

    def vmap_for_bhqkv(mask_function: Callable[..., Any], bh_indices: bool = True) -> Callable[..., Any]:
        if is_tracing():
            return _broadcast_for_bhqkv(mask_function, bh_indices)
        return original(mask_function, bh_indices)

    _patches.patch(masking_utils, "_vmap_for_bhqkv", vmap_for_bhqkv)
