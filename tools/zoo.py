#!/usr/bin/env python
"""Model zoo: trace real models with ``specfx.trace`` and ``torch.fx.symbolic_trace``
and check the graphs against eager execution.

    python tools/zoo.py                      # every model, one table
    python tools/zoo.py --models 'hf-*' nn-lstm   # names or globs (see --list)
    python tools/zoo.py --json               # machine-readable results
    python tools/zoo.py --in-process         # no subprocess per model (faster, but a crash ends the run)

Per model the table shows: whether plain ``symbolic_trace`` traces it (and whether
that graph matches eager), whether ``specfx.trace`` does, the graph's node count,
the specializations by kind, the policy used (the narrowest that works: flags are
only added where a trace needs them; leaf modules / non-leaf torch.nn modules are
listed), the largest absolute difference to eager over fresh inputs (other batch
sizes and sequence lengths where the guards allow them), and what happens on an
input that changes a specialized decision (the guard that fires, and what eager
does with that input).

Models are built from config objects / constructors with random weights, small
sizes, no downloads (``HF_HUB_OFFLINE=1``). HuggingFace models run when
``transformers`` is importable (4.57.x: the last line with ``transformers.utils.fx``;
written against 4.57.6), timm models when ``timm`` is importable. timm needs
torchvision, which has no wheel for the CPU torch 2.13 build, so the hand-written
``blocks`` below are faithful equivalents of timm's ResNet bottleneck stage, ConvNeXt
block, ViT block and Swin block (window partition / cyclic shift / padding / dynamic
attention mask), written after timm 1.0's code.

Every model runs in a subprocess by default, because some specfx failures are
crashes (segmentation faults), not exceptions; the table then says where it crashed.

``tests/test_zoo.py`` imports this file for the model definitions; keep builders
cheap (tiny configs) so that the CI subset stays fast.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import fnmatch
import importlib.util
import inspect
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

import specfx
from specfx import Policy, Specialize

Call = Tuple[tuple, Dict[str, Any]]

# ---------------------------------------------------------------------------------------
# Hand-written equivalents of timm blocks (timm 1.0: layers/drop.py, layers/mlp.py,
# models/resnet.py, models/convnext.py, models/vision_transformer.py,
# models/swin_transformer.py). Forward code follows timm line by line; only
# initialisation is simplified.
# ---------------------------------------------------------------------------------------


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """timm.layers.drop.drop_path (stochastic depth per sample)."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    """timm.layers.DropPath."""

    def __init__(self, drop_prob: float = 0.0, scale_by_keep: bool = True):
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class Mlp(nn.Module):
    """timm.layers.Mlp."""

    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.norm(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


class ConvMlp(nn.Module):
    """timm.layers.ConvMlp (1x1 convolutions, channels-first)."""

    def __init__(self, in_features, hidden_features, act_layer=nn.ReLU, drop=0.0):
        super().__init__()
        self.fc1 = nn.Conv2d(in_features, hidden_features, kernel_size=1)
        self.norm = nn.Identity()
        self.act = act_layer()
        self.drop = nn.Dropout(drop)
        self.fc2 = nn.Conv2d(hidden_features, in_features, kernel_size=1)

    def forward(self, x):
        x = self.fc1(x)
        x = self.norm(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        return x


class LayerNorm2d(nn.LayerNorm):
    """timm.layers.LayerNorm2d: LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x = x.permute(0, 3, 1, 2)
        return x


class Bottleneck(nn.Module):
    """timm.models.resnet.Bottleneck (no SE / anti-aliasing / drop-block, as in resnet50)."""

    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, drop_path=None):
        super().__init__()
        width = planes
        outplanes = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.drop_block = nn.Identity()
        self.act2 = nn.ReLU(inplace=True)
        self.aa = nn.Identity()
        self.conv3 = nn.Conv2d(width, outplanes, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(outplanes)
        self.se = None
        self.act3 = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.drop_path = drop_path

    def forward(self, x):
        shortcut = x
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.act1(x)
        x = self.conv2(x)
        x = self.bn2(x)
        x = self.drop_block(x)
        x = self.act2(x)
        x = self.aa(x)
        x = self.conv3(x)
        x = self.bn3(x)
        if self.se is not None:
            x = self.se(x)
        if self.drop_path is not None:
            x = self.drop_path(x)
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        x = self.act3(x)
        return x


def resnet_stage(inplanes=16, planes=8, blocks=2, stride=2, drop_path_rate=0.0) -> nn.Sequential:
    """A ResNet stage as timm's ``make_blocks`` builds it: a strided, downsampling first block."""
    downsample = nn.Sequential(
        nn.Conv2d(inplanes, planes * Bottleneck.expansion, kernel_size=1, stride=stride, bias=False),
        nn.BatchNorm2d(planes * Bottleneck.expansion),
    )
    layers = []
    for index in range(blocks):
        layers.append(Bottleneck(
            inplanes if index == 0 else planes * Bottleneck.expansion, planes,
            stride=stride if index == 0 else 1, downsample=downsample if index == 0 else None,
            drop_path=DropPath(drop_path_rate) if drop_path_rate > 0 else None,
        ))
    return nn.Sequential(*layers)


class ConvNeXtBlock(nn.Module):
    """timm.models.convnext.ConvNeXtBlock (depthwise conv, channels-last MLP or conv MLP, layer scale)."""

    def __init__(self, in_chs, kernel_size=7, mlp_ratio=4, conv_mlp=False, ls_init_value=1e-6, drop_path=0.0):
        super().__init__()
        self.use_conv_mlp = conv_mlp
        self.conv_dw = nn.Conv2d(in_chs, in_chs, kernel_size, padding=kernel_size // 2, groups=in_chs)
        self.norm = LayerNorm2d(in_chs, eps=1e-6) if conv_mlp else nn.LayerNorm(in_chs, eps=1e-6)
        mlp_layer = ConvMlp if conv_mlp else Mlp
        self.mlp = mlp_layer(in_chs, int(mlp_ratio * in_chs), act_layer=nn.GELU)
        self.gamma = nn.Parameter(ls_init_value * torch.ones(in_chs)) if ls_init_value is not None else None
        self.shortcut = nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x)
        if self.use_conv_mlp:
            x = self.norm(x)
            x = self.mlp(x)
        else:
            x = x.permute(0, 2, 3, 1)
            x = self.norm(x)
            x = self.mlp(x)
            x = x.permute(0, 3, 1, 2)
        if self.gamma is not None:
            x = x.mul(self.gamma.reshape(1, -1, 1, 1))
        x = self.drop_path(x) + self.shortcut(shortcut)
        return x


class Attention(nn.Module):
    """timm.models.vision_transformer.Attention (fused SDPA path, as timm uses by default)."""

    fused_attn = True

    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = nn.Identity()
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask: Optional[torch.Tensor] = None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            if attn_mask is not None:
                attn = attn + attn_mask
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.norm(x)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class LayerScale(nn.Module):
    """timm.models.vision_transformer.LayerScale."""

    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class ViTBlock(nn.Module):
    """timm.models.vision_transformer.Block (pre-norm attention + MLP, layer scale, drop path)."""

    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=True, init_values=1e-5, drop_path=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x, attn_mask: Optional[torch.Tensor] = None):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


def window_partition(x, window_size: Tuple[int, int]):
    """timm swin_transformer.window_partition: (B, H, W, C) -> (num_windows*B, wh, ww, C)."""
    B, H, W, C = x.shape
    x = x.view(B, H // window_size[0], window_size[0], W // window_size[1], window_size[1], C)
    windows = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size[0], window_size[1], C)
    return windows


def window_reverse(windows, window_size: Tuple[int, int], H: int, W: int):
    """timm swin_transformer.window_reverse (timm marks it @register_notrace_function for plain FX)."""
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size[0], W // window_size[1], window_size[0], window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)
    return x


def get_relative_position_index(win_h: int, win_w: int):
    """timm swin_transformer.get_relative_position_index."""
    coords = torch.stack(torch.meshgrid([torch.arange(win_h), torch.arange(win_w)], indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += win_h - 1
    relative_coords[:, :, 1] += win_w - 1
    relative_coords[:, :, 0] *= 2 * win_w - 1
    return relative_coords.sum(-1)


class WindowAttention(nn.Module):
    """timm swin_transformer.WindowAttention: window MSA with relative position bias (fused path)."""

    fused_attn = True

    def __init__(self, dim, num_heads, window_size=(7, 7), qkv_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.window_size = window_size
        win_h, win_w = window_size
        self.window_area = win_h * win_w
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            0.02 * torch.randn((2 * win_h - 1) * (2 * win_w - 1), num_heads))
        self.register_buffer("relative_position_index", get_relative_position_index(win_h, win_w),
                             persistent=False)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.softmax = nn.Softmax(dim=-1)

    def _get_rel_pos_bias(self) -> torch.Tensor:
        relative_position_bias = self.relative_position_bias_table[
            self.relative_position_index.view(-1)].view(self.window_area, self.window_area, -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
        return relative_position_bias.unsqueeze(0)

    def forward(self, x, mask: Optional[torch.Tensor] = None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.fused_attn:
            attn_mask = self._get_rel_pos_bias()
            if mask is not None:
                num_win = mask.shape[0]
                mask = mask.view(1, num_win, 1, N, N).expand(B_ // num_win, -1, self.num_heads, -1, -1)
                attn_mask = attn_mask + mask.reshape(-1, self.num_heads, N, N)
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = attn + self._get_rel_pos_bias()
            if mask is not None:
                num_win = mask.shape[0]
                attn = attn.view(-1, num_win, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
                attn = attn.view(-1, self.num_heads, N, N)
            attn = self.softmax(attn)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B_, N, -1)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class SwinTransformerBlock(nn.Module):
    """timm swin_transformer.SwinTransformerBlock (NHWC input): cyclic shift (torch.roll),
    padding to whole windows, window partition/reverse, and the shifted-window attention
    mask, either precomputed for ``input_resolution`` (timm's default) or built from the
    input in forward (``dynamic_mask=True``, what timm uses for variable image sizes)."""

    def __init__(self, dim, input_resolution, num_heads=4, window_size=4, shift_size=0, mlp_ratio=4.0,
                 drop_path=0.0, dynamic_mask=False):
        super().__init__()
        self.dim = dim
        self.input_resolution = input_resolution
        self.window_size = (window_size, window_size)
        self.shift_size = (shift_size, shift_size)
        self.window_area = window_size * window_size
        self.dynamic_mask = dynamic_mask
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads=num_heads, window_size=self.window_size)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.register_buffer("attn_mask", None if self.dynamic_mask else self.get_attn_mask(),
                             persistent=False)

    def get_attn_mask(self, x: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
        if any(self.shift_size):
            # calculate attention mask for SW-MSA
            if x is not None:
                H, W = x.shape[1], x.shape[2]
                device = x.device
                dtype = x.dtype
            else:
                H, W = self.input_resolution
                device = None
                dtype = None
            H = math.ceil(H / self.window_size[0]) * self.window_size[0]
            W = math.ceil(W / self.window_size[1]) * self.window_size[1]
            img_mask = torch.zeros((1, H, W, 1), dtype=dtype, device=device)  # 1 H W 1
            cnt = 0
            for h in ((0, -self.window_size[0]), (-self.window_size[0], -self.shift_size[0]),
                      (-self.shift_size[0], None)):
                for w in ((0, -self.window_size[1]), (-self.window_size[1], -self.shift_size[1]),
                          (-self.shift_size[1], None)):
                    img_mask[:, h[0]:h[1], w[0]:w[1], :] = cnt
                    cnt += 1
            mask_windows = window_partition(img_mask, self.window_size)  # nW, window_size, window_size, 1
            mask_windows = mask_windows.view(-1, self.window_area)
            attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0))
            attn_mask = attn_mask.masked_fill(attn_mask == 0, float(0.0))
        else:
            attn_mask = None
        return attn_mask

    def _attn(self, x):
        B, H, W, C = x.shape
        # cyclic shift
        has_shift = any(self.shift_size)
        if has_shift:
            shifted_x = torch.roll(x, shifts=(-self.shift_size[0], -self.shift_size[1]), dims=(1, 2))
        else:
            shifted_x = x
        # pad for resolution not divisible by window size
        pad_h = (self.window_size[0] - H % self.window_size[0]) % self.window_size[0]
        pad_w = (self.window_size[1] - W % self.window_size[1]) % self.window_size[1]
        shifted_x = torch.nn.functional.pad(shifted_x, (0, 0, 0, pad_w, 0, pad_h))
        _, Hp, Wp, _ = shifted_x.shape
        # partition windows
        x_windows = window_partition(shifted_x, self.window_size)  # nW*B, window_size, window_size, C
        x_windows = x_windows.view(-1, self.window_area, C)  # nW*B, window_size*window_size, C
        # W-MSA/SW-MSA
        if getattr(self, "dynamic_mask", False):
            attn_mask = self.get_attn_mask(shifted_x)
        else:
            attn_mask = self.attn_mask
        attn_windows = self.attn(x_windows, mask=attn_mask)  # nW*B, window_size*window_size, C
        # merge windows
        attn_windows = attn_windows.view(-1, self.window_size[0], self.window_size[1], C)
        shifted_x = window_reverse(attn_windows, self.window_size, Hp, Wp)  # B H' W' C
        shifted_x = shifted_x[:, :H, :W, :].contiguous()
        # reverse cyclic shift
        if has_shift:
            x = torch.roll(shifted_x, shifts=self.shift_size, dims=(1, 2))
        else:
            x = shifted_x
        return x

    def forward(self, x):
        B, H, W, C = x.shape
        x = x + self.drop_path1(self._attn(self.norm1(x)))
        x = x.reshape(B, -1, C)
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        x = x.reshape(B, H, W, C)
        return x


class Tagger(nn.Module):
    """Embedding -> recurrent layer -> per-token classifier: an nn.LSTM / nn.GRU inside a model."""

    def __init__(self, rnn: nn.Module, vocab: int = 50, hidden: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, rnn.input_size)
        self.rnn = rnn
        self.out = nn.Linear(hidden, 5)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.out(y)


# ---------------------------------------------------------------------------------------
# Tracing through torch.nn modules that torch.fx (and specfx.trace) keep as leaves
# ---------------------------------------------------------------------------------------


class NonLeafSpecTracer(specfx.SpecTracer):
    """A SpecTracer that traces *through* the torch.nn module types in ``nonleaf``
    (torch.fx makes every torch.nn module a leaf; ``trace(leaf_modules=...)`` can only add leaves)."""

    nonleaf: Tuple[type, ...] = ()

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self.nonleaf and isinstance(m, self.nonleaf):
            return False
        return super().is_leaf_module(m, module_qualified_name)


def _fx_tracer(leaf: Sequence[type] = (), nonleaf: Sequence[type] = ()) -> torch.fx.Tracer:
    """A plain torch.fx.Tracer with the same leaf decisions, for the symbolic_trace column."""

    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            if nonleaf and isinstance(m, tuple(nonleaf)):
                return False
            if leaf and isinstance(m, tuple(leaf)):
                return True
            return super().is_leaf_module(m, qualname)

    return Tracer()


def trace_with_tracer(tracer_cls: type, root: nn.Module, args: tuple, kwargs: Dict[str, Any],
                      policy: Policy, leaf_modules: Sequence[type] = (), nonleaf: Sequence[type] = ()):
    """``specfx.trace`` with a SpecTracer subclass, through public API only: bind the
    examples to ``forward``'s parameter names, trace, wrap in a GraphModule."""
    signature = inspect.signature(type(root).forward)
    bound = signature.bind(root, *args, **kwargs)
    examples = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = signature.parameters[name].kind
        prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(kind, "")
        examples[prefix + name] = _clone(value)
    cls = type(tracer_cls.__name__, (tracer_cls,), {"nonleaf": tuple(nonleaf)})
    tracer = cls(policy=policy, leaf_modules=list(leaf_modules))
    tracer.set_examples(examples)
    graph = tracer.trace(root)
    gm = torch.fx.GraphModule(tracer.root, graph, type(root).__name__)
    gm.specializations = list(tracer.specializations)
    return gm


def _clone(value: Any) -> Any:
    return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), value)


# ---------------------------------------------------------------------------------------
# HuggingFace transformers models (4.57) built from configs
# ---------------------------------------------------------------------------------------


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


class HFCausalMask(nn.Module):
    """transformers' own 4-D mask builder (``masking_utils.create_causal_mask``, or the
    sliding-window variant when the config has a window) as a *leaf module*.

    transformers 4.57 builds these masks with ``torch.vmap``, which no FX tracer can
    record; as a leaf it runs on the example values and again at call time, exactly as
    the model would run it. An sdpa model that would skip the mask (``is_causal``) gets
    the equivalent explicit causal mask, so the graph has a single path."""

    def __init__(self, config, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        self.dtype = dtype

    def forward(self, input_ids, attention_mask=None):
        from transformers import masking_utils

        sliding = getattr(self.config, "sliding_window", None) is not None
        build = (masking_utils.create_sliding_window_causal_mask if sliding
                 else masking_utils.create_causal_mask)
        batch, length = input_ids.shape
        # only the shape and dtype of the embeddings are read
        embeds = torch.empty(batch, length, 0, dtype=self.dtype, device=input_ids.device)
        positions = torch.arange(length, device=input_ids.device)
        parameters = inspect.signature(build).parameters  # transformers 5 renamed input_embeds
        embeds_name = "inputs_embeds" if "inputs_embeds" in parameters else "input_embeds"
        # position ids as the model passes them (transformers 5 looks for packed sequences in them, which
        # needs data: skipped on meta, where an arange is never packed)
        position_ids = None if input_ids.device.type == "meta" else positions.unsqueeze(0)
        mask = build(config=self.config, attention_mask=attention_mask, cache_position=positions,
                     past_key_values=None, position_ids=position_ids, **{embeds_name: embeds})
        if mask is None:
            causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
            mask = causal[None, None].expand(batch, 1, length, length)
        return mask


class DecoderWithLeafMask(nn.Module):
    """A decoder called with a 2-D padding mask whose 4-D form is built by :class:`HFCausalMask`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.mask = HFCausalMask(model.config, next(model.parameters()).dtype)

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids, attention_mask=self.mask(input_ids, attention_mask)).last_hidden_state


class DecoderAsIs(nn.Module):
    """A decoder called as users call it: ``model(input_ids, attention_mask=2-D mask)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask=attention_mask).last_hidden_state


class BertLastHidden(nn.Module):
    """``BertModel(...).last_hidden_state`` with an explicit signature (transformers 5 wraps
    BertModel.forward in ``*args, **kwargs``, which torch.fx cannot trace as the root)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        return self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids).last_hidden_state


class ViTLastHidden(nn.Module):
    """``ViTModel(pixel_values).last_hidden_state``; tracing ViTModel as the root fails in
    torch.fx itself (its forward is wrapped in ``*args, **kwargs`` by @check_model_inputs)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values).last_hidden_state


class T5LastHidden(nn.Module):
    """``T5Model(...).last_hidden_state`` (the decoder's output)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids).last_hidden_state


def _ids(batch: int, length: int, vocab: int = 100, pad: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a 2-D attention mask whose first row is left-padded by ``pad`` tokens."""
    ids = torch.randint(0, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        mask[0, :pad] = 0
    return ids, mask


def bert_config(attn_implementation: str = "eager", layers: int = 2):
    transformers = _transformers()
    return transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers,
                                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                   attn_implementation=attn_implementation)


def bert_inputs(batch: int, length: int, pad: int = 2) -> Call:
    ids, mask = _ids(batch, length, pad=pad)
    return (ids,), {"attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                    "position_ids": torch.arange(length).expand(batch, length)}


def llama_config(layers: int = 2, hidden: int = 32, intermediate: int = 64, heads: int = 4, kv_heads: int = 2,
                 vocab: int = 100, attn_implementation: str = "sdpa"):
    transformers = _transformers()
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                                    num_hidden_layers=layers, num_attention_heads=heads,
                                    num_key_value_heads=kv_heads, max_position_embeddings=4096,
                                    use_cache=False, attn_implementation=attn_implementation)


def gpt2_config():
    transformers = _transformers()
    return transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                   use_cache=False)


def mistral_config():
    transformers = _transformers()
    return transformers.MistralConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, sliding_window=4, use_cache=False)


def t5_config():
    transformers = _transformers()
    return transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                 num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                                 relative_attention_max_distance=16, use_cache=False,
                                 decoder_start_token_id=0)


def vit_config():
    transformers = _transformers()
    return transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, image_size=32, patch_size=8, num_channels=3)


# ---------------------------------------------------------------------------------------
# The zoo
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Built:
    """One model ready to trace: example, fresh inputs, policy and how to trace it."""

    model: nn.Module
    example: Call
    fresh: List[Call]
    policy: Optional[Policy]  # None: try a ladder of policies, narrowest first
    guard_input: Optional[Tuple[Call, str]] = None  # an input that flips a specialized decision, described
    leaf_modules: Tuple[type, ...] = ()
    nonleaf: Tuple[type, ...] = ()  # torch.nn types traced through (NonLeafSpecTracer)
    reference: Optional[Callable[..., Any]] = None  # eager reference; default: the model itself
    train: bool = False
    grad: bool = True
    concrete_args: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class Case:
    """A zoo entry: a name, a builder and what is known about it."""

    name: str
    group: str
    build: Callable[[], Built]
    requires: Optional[str] = None
    note: str = ""


LADDER = [Policy(), Policy(bool=True), Policy(iter=True), Policy(iter=True, bool=True), Policy(shapes=True),
          Policy(shapes=True, bool=True), Policy(shapes=True, bool=True, iter=True), Policy(Specialize.ALL)]


def _decoder_leaf(make_model: Callable[[], nn.Module], rotary: Optional[Callable[[], type]],
                  extra_leaf: Sequence[type] = ()) -> Built:
    torch.manual_seed(0)
    base = make_model().eval()
    leaf = (HFCausalMask,) + ((rotary(),) if rotary else ()) + tuple(extra_leaf)
    return Built(
        DecoderWithLeafMask(base).eval(),
        ((_ids(2, 8, pad=3)), {}),
        [((_ids(3, 5, pad=2)), {}), ((_ids(4, 12, pad=4)), {})],
        None,
        guard_input=(((_ids(2, 1)), {}), "sequence length 1"),
        leaf_modules=leaf,
        reference=lambda ids, mask=None: base(ids, attention_mask=mask).last_hidden_state,
    )


def _decoder_as_is(make_model: Callable[[], nn.Module]) -> Built:
    torch.manual_seed(0)
    model = DecoderAsIs(make_model().eval()).eval()
    fresh = [((_ids(3, 5, pad=2)), {}), ((_ids(2, 8, pad=1)), {})]
    return Built(model, ((_ids(2, 8, pad=3)), {}), fresh, None)


def _bert(attn_implementation: str, root: bool = False) -> nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    model = transformers.BertModel(bert_config(attn_implementation)).eval()
    return model if root else BertLastHidden(model).eval()


def _bert_three_d_mask() -> Tuple[Call, str]:
    call = bert_inputs(2, 8)
    call[1]["attention_mask"] = torch.ones(2, 8, 8, dtype=torch.long)
    return call, "a 3-D attention mask"


def _build_bert(root: bool = False) -> Callable[[], Built]:
    def build() -> Built:
        return Built(_bert("eager", root), bert_inputs(2, 8), [bert_inputs(3, 5), bert_inputs(4, 12, pad=5)],
                     None, guard_input=_bert_three_d_mask())

    return build


def _build_bert_shapes() -> Built:
    def call(batch, length, pad=2):
        ids, mask = _ids(batch, length, pad=pad)
        return (ids, mask), {}

    return Built(_bert("eager"), call(2, 8), [call(2, 8, pad=3), call(2, 8, pad=0), call(3, 5)], None,
                 guard_input=(call(2, 12), "sequence length 12"))


def _build_bert_sdpa() -> Built:
    return Built(_bert("sdpa"), bert_inputs(2, 8), [bert_inputs(3, 5), bert_inputs(2, 8, pad=4)], None)


def _build_gpt2_leaf() -> Built:
    transformers = _transformers()
    from transformers.activations import NewGELUActivation

    built = _decoder_leaf(lambda: transformers.GPT2Model(gpt2_config()), None,
                          extra_leaf=(NewGELUActivation,))
    built.guard_input = None  # GPT-2 decides nothing on the input's shape: every length takes the same path
    return built


def _build_t5() -> Built:
    transformers = _transformers()
    torch.manual_seed(0)
    model = T5LastHidden(transformers.T5Model(t5_config()).eval()).eval()

    def call(batch, length, target):
        ids, mask = _ids(batch, length, pad=2)
        return (ids, mask, torch.randint(0, 100, (batch, target))), {}

    return Built(model, call(2, 8, 5), [call(2, 8, 5), call(3, 6, 4)], None,
                 guard_input=(call(2, 12, 5), "source length 12"))


def _build_vit() -> Built:
    transformers = _transformers()
    torch.manual_seed(0)
    model = ViTLastHidden(transformers.ViTModel(vit_config(), add_pooling_layer=False).eval()).eval()
    return Built(model, ((torch.randn(2, 3, 32, 32),), {}), [((torch.randn(3, 3, 32, 32),), {}),
                                                             ((torch.randn(5, 3, 32, 32),), {})],
                 None, guard_input=(((torch.randn(2, 3, 48, 48),), {}), "a 48x48 image"))


def _build_llama_leaf() -> Built:
    transformers = _transformers()
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return _decoder_leaf(lambda: transformers.LlamaModel(llama_config()), lambda: LlamaRotaryEmbedding)


def _build_mistral_leaf() -> Built:
    transformers = _transformers()
    from transformers.models.mistral.modeling_mistral import MistralRotaryEmbedding

    return _decoder_leaf(lambda: transformers.MistralModel(mistral_config()), lambda: MistralRotaryEmbedding)


def _images(shape: Tuple[int, ...], *others: Tuple[int, ...]) -> Tuple[Call, List[Call]]:
    return ((torch.randn(*shape),), {}), [((torch.randn(*o),), {}) for o in others]


def _block(make: Callable[[], nn.Module], shapes: Sequence[Tuple[int, ...]], train: bool = False,
           guard: Optional[Tuple[Tuple[int, ...], str]] = None,
           guard_kwargs: Optional[Callable[[], Tuple[Call, str]]] = None) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        model = make().train(train)
        example, fresh = _images(*shapes)
        guard_input = None
        if guard is not None:
            guard_input = (((torch.randn(*guard[0]),), {}), guard[1])
        if guard_kwargs is not None:
            guard_input = guard_kwargs()
        return Built(model, example, fresh, None, guard_input=guard_input, train=train)

    return build


def _vit_block_mask_input() -> Tuple[Call, str]:
    return ((torch.randn(2, 10, 32),), {"attn_mask": torch.zeros(10, 10)}), "an attention mask"


def _build_mha() -> Built:
    torch.manual_seed(0)
    model = nn.MultiheadAttention(16, 4, batch_first=True).eval()

    def call(batch, length):
        x = torch.randn(batch, length, 16)
        mask = torch.zeros(batch, length, dtype=torch.bool)
        mask[0, -1] = True
        return (x, x, x), {"key_padding_mask": mask}

    unbatched = torch.randn(5, 16)
    no_padding = torch.zeros(5, dtype=torch.bool)
    unbatched_call = ((unbatched, unbatched, unbatched), {"key_padding_mask": no_padding})
    return Built(model, call(2, 5), [call(3, 7), call(4, 2)], None,
                 guard_input=(unbatched_call, "an unbatched (L, E) query"))


def _build_encoder_layer(train: bool = False, nonleaf: bool = False) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        model = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True).train(train)
        example, fresh = _images((2, 5, 16), (3, 9, 16), (1, 4, 16))
        return Built(model, example, fresh, None, train=train,
                     guard_input=(((torch.randn(5, 16),), {}), "an unbatched (S, E) input"),
                     nonleaf=(nn.MultiheadAttention,) if nonleaf else ())

    return build


def _build_encoder(train: bool = False, grad: bool = True) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True)
        model = nn.TransformerEncoder(layer, 2).train(train)

        def call(batch, length, pad):
            mask = torch.zeros(batch, length, dtype=torch.bool)
            mask[0, length - pad:] = True
            return (torch.randn(batch, length, 16),), {"src_key_padding_mask": mask}

        unbatched = ((torch.randn(5, 16),), {"src_key_padding_mask": torch.zeros(5, dtype=torch.bool)})
        return Built(model, call(2, 5, 2), [call(3, 7, 3), call(4, 3, 1)], None,
                     train=train, grad=grad, guard_input=(unbatched, "an unbatched (S, E) input"))

    return build


def _build_rnn(kind: str, nonleaf: bool) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)
        rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(8, 16, num_layers=2, batch_first=True)
        model = Tagger(rnn).eval()
        example = ((torch.randint(0, 50, (2, 6)),), {})
        fresh = [((torch.randint(0, 50, (3, 9)),), {}), ((torch.randint(0, 50, (5, 2)),), {})]
        if not nonleaf:
            return Built(model, example, fresh, None)
        return Built(model, example, fresh, Policy(scopes={"rnn": Policy(bool=True)}),
                     nonleaf=(type(rnn),),
                     guard_input=(((torch.randint(0, 50, (6,)),), {}), "an unbatched (S,) sequence"))

    return build


def _timm_case(name: str) -> Callable[[], Built]:
    def build() -> Built:
        import timm

        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
        return Built(model, ((torch.randn(2, *size),), {}), [((torch.randn(3, *size),), {})], None)

    return build


BLOCK_NOTE = "hand-written equivalent of the timm block (no torchvision for torch 2.13 CPU, so no timm)"
TIMM_MODELS = ("resnet50", "efficientnet_b0", "vit_tiny_patch16_224", "swin_tiny_patch4_window7_224",
               "convnext_atto")
UNBATCHED = ((8, 8, 16), "a 3-D (unbatched) input")


def _transformers_model(name: str, config: Callable[[], Any]) -> Callable[[], nn.Module]:
    return lambda: getattr(_transformers(), name)(config())


CASES: List[Case] = [
    # -- transformers ---------------------------------------------------------------------
    Case("hf-bert", "transformers", _build_bert(), "transformers",
         "BertModel (eager attention) called with input_ids, attention_mask, token_type_ids and "
         "position_ids, through a wrapper returning last_hidden_state"),
    Case("hf-bert[root]", "transformers", _build_bert(root=True), "transformers",
         "BertModel itself as the root (returns a ModelOutput; the graph returns the same fields)"),
    Case("hf-bert[shapes]", "transformers", _build_bert_shapes, "transformers",
         "BertModel (eager attention) called with input_ids and attention_mask only: it slices its "
         "token_type_ids/position_ids buffers by the sequence length"),
    Case("hf-bert[sdpa]", "transformers", _build_bert_sdpa, "transformers",
         "BertModel with its default sdpa attention (mask built with torch.finfo(embedding_output.dtype))"),
    Case("hf-gpt2", "transformers", lambda: _decoder_as_is(_transformers_model("GPT2Model", gpt2_config)),
         "transformers",
         "GPT2Model as users call it (2-D padding mask): transformers builds the 4-D mask with torch.vmap, "
         "NewGELUActivation calls torch.pow(x, 3.0)"),
    Case("hf-gpt2[leaf]", "transformers", _build_gpt2_leaf, "transformers",
         "GPT2Model with transformers' mask builder (torch.vmap) and NewGELUActivation as leaf modules"),
    Case("hf-t5", "transformers", _build_t5, "transformers",
         "T5Model encoder-decoder (T5Stack: torch.ones(batch, length), torch.finfo(inputs_embeds.dtype))"),
    Case("hf-vit", "transformers", _build_vit, "transformers",
         "ViTModel through a one-line wrapper (root forward is *args/**kwargs-wrapped); any batch size"),
    Case("hf-llama", "transformers", lambda: _decoder_as_is(_transformers_model("LlamaModel", llama_config)),
         "transformers",
         "LlamaModel as users call it (2-D padding mask): torch.vmap mask creation; RoPE enters "
         "torch.autocast(device_type=x.device.type)"),
    Case("hf-llama[leaf]", "transformers", _build_llama_leaf, "transformers",
         "LlamaModel (sdpa, GQA) with the mask builder and LlamaRotaryEmbedding (torch.autocast on "
         "x.device.type) as leaves"),
    Case("hf-mistral[leaf]", "transformers", _build_mistral_leaf, "transformers",
         "MistralModel with sliding-window mask builder and MistralRotaryEmbedding as leaves"),
    # -- timm (only when importable) ------------------------------------------------------
    *[Case(f"timm-{name}", "timm", _timm_case(name), "timm",
           "timm model, pretrained=False; policy found by ladder") for name in TIMM_MODELS],
    # -- hand-written timm blocks ---------------------------------------------------------
    Case("resnet-stage", "blocks",
         _block(lambda: resnet_stage(16, 8, 2), [(2, 16, 16, 16), (3, 16, 9, 9)]),
         note=BLOCK_NOTE + "; BatchNorm in eval mode"),
    Case("resnet-stage[train]", "blocks",
         _block(lambda: resnet_stage(16, 8, 2, drop_path_rate=0.1), [(2, 16, 16, 16), (3, 16, 9, 9)],
                train=True),
         note=BLOCK_NOTE + "; train-mode BatchNorm and DropPath (stochastic depth)"),
    Case("convnext-block", "blocks",
         _block(lambda: ConvNeXtBlock(16), [(2, 16, 8, 8), (3, 16, 5, 7)]),
         note=BLOCK_NOTE),
    Case("convnext-block[conv_mlp,train]", "blocks",
         _block(lambda: ConvNeXtBlock(16, conv_mlp=True, drop_path=0.1), [(2, 16, 8, 8), (3, 16, 5, 7)],
                train=True),
         note=BLOCK_NOTE + "; LayerNorm2d + ConvMlp, DropPath in train mode"),
    Case("vit-block", "blocks",
         _block(lambda: ViTBlock(32, 4), [(2, 10, 32), (3, 7, 32), (1, 50, 32)],
                guard_kwargs=_vit_block_mask_input),
         note=BLOCK_NOTE),
    Case("vit-block[train]", "blocks",
         _block(lambda: ViTBlock(32, 4, drop_path=0.1), [(2, 10, 32), (3, 7, 32)], train=True,
                guard_kwargs=_vit_block_mask_input),
         note=BLOCK_NOTE + "; DropPath in train mode"),
    Case("swin-block", "blocks",
         _block(lambda: SwinTransformerBlock(16, (8, 8), num_heads=2, window_size=4, shift_size=2,
                                             dynamic_mask=True),
                [(2, 8, 8, 16), (3, 6, 10, 16), (1, 13, 5, 16)], guard=UNBATCHED),
         note=BLOCK_NOTE + "; shifted windows, padding, attention mask built in forward (img_mask[...] = cnt "
                           "is what plain FX cannot trace)"),
    Case("swin-block[static-mask]", "blocks",
         _block(lambda: SwinTransformerBlock(16, (8, 8), num_heads=2, window_size=4, shift_size=2),
                [(2, 8, 8, 16), (3, 8, 8, 16)], guard=UNBATCHED),
         note=BLOCK_NOTE + "; mask precomputed for the input resolution (timm's default)"),
    # -- torch.nn built-ins ---------------------------------------------------------------
    Case("nn-mha", "torch.nn", _build_mha,
         note="nn.MultiheadAttention as the root (so it is traced through)"),
    Case("nn-encoder-layer", "torch.nn", _build_encoder_layer(),
         note="nn.TransformerEncoderLayer, eval; its MultiheadAttention stays a torch.fx leaf"),
    Case("nn-encoder-layer[train]", "torch.nn", _build_encoder_layer(train=True),
         note="nn.TransformerEncoderLayer, train mode (dropout 0.1; compared under the same seed)"),
    Case("nn-encoder-layer[non-leaf mha]", "torch.nn", _build_encoder_layer(nonleaf=True),
         note="nn.TransformerEncoderLayer with its MultiheadAttention traced through (NonLeafSpecTracer)"),
    Case("nn-encoder", "torch.nn", _build_encoder(),
         note="nn.TransformerEncoder (2 layers) with src_key_padding_mask, eval"),
    Case("nn-encoder[train]", "torch.nn", _build_encoder(train=True),
         note="nn.TransformerEncoder, train mode"),
    Case("nn-encoder[no_grad]", "torch.nn", _build_encoder(grad=False),
         note="nn.TransformerEncoder, eval under torch.no_grad(): eager takes the nested-tensor fast path "
              "and returns 0 at padded positions; the trace chose the slow path because "
              "torch.overrides.has_torch_function(proxies) is True while tracing, an unguardable decision: "
              "outputs agree at the real tokens and differ at padded ones"),
    Case("nn-lstm", "torch.nn", _build_rnn("lstm", nonleaf=False),
         note="nn.LSTM inside a model, as a leaf (default)"),
    Case("nn-lstm[non-leaf]", "torch.nn", _build_rnn("lstm", nonleaf=True),
         note="nn.LSTM traced through (NonLeafSpecTracer); BOOL only inside the rnn scope"),
    Case("nn-gru", "torch.nn", _build_rnn("gru", nonleaf=False),
         note="nn.GRU inside a model, as a leaf (default)"),
    Case("nn-gru[non-leaf]", "torch.nn", _build_rnn("gru", nonleaf=True),
         note="nn.GRU traced through (NonLeafSpecTracer); BOOL only inside the rnn scope"),
]
CASES_BY_NAME = {case.name: case for case in CASES}


# ---------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------


def available(case: Case) -> bool:
    """Whether the case's optional dependency imports."""
    if case.requires is None:
        return True
    return importlib.util.find_spec(case.requires) is not None and _imports(case.requires)


def _imports(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:  # timm raises RuntimeError/ImportError without a working torchvision
        return False


def trace_built(built: Built, policy: Optional[Policy] = None) -> torch.fx.GraphModule:
    """Trace a built case with specfx, as the zoo does (SpecTracer subclass when non-leaf types are given)."""
    policy = built.policy if policy is None else policy
    with torch.set_grad_enabled(built.grad):
        args, kwargs = built.example
        if built.nonleaf:
            return trace_with_tracer(NonLeafSpecTracer, built.model, args, kwargs, policy,
                                     built.leaf_modules, built.nonleaf)
        return specfx.trace(built.model, args, kwargs or None, policy=policy,
                            leaf_modules=list(built.leaf_modules) or None, concrete_args=built.concrete_args)


def narrowest(built: Built) -> Tuple[torch.fx.GraphModule, Policy]:
    """Trace with the first policy of the ladder that works (the case's own policy first)."""
    policies = ([built.policy] if built.policy is not None else []) + [p for p in LADDER if p != built.policy]
    error: Optional[Exception] = None
    for policy in policies:
        try:
            return trace_built(built, policy), policy
        except Exception as failure:  # the next, wider policy may work
            error = failure
    assert error is not None
    raise error


def run_pair(built: Built, gm: Callable[..., Any], call: Call, seed: int = 1234) -> Tuple[Any, Any]:
    """Eager reference and graph output on one input (same RNG seed for both, so dropout matches)."""
    args, kwargs = call
    reference = built.reference or built.model
    with torch.set_grad_enabled(built.grad):
        torch.manual_seed(seed)
        expected = reference(*_clone(args), **_clone(kwargs))
        torch.manual_seed(seed)
        actual = gm(*_clone(args), **_clone(kwargs))
    return expected, actual


def tensors_of(value: Any) -> List[torch.Tensor]:
    """The tensors of a model output (tensors, tuples, lists, dicts, transformers ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    return []


def max_abs_diff(expected: Any, actual: Any) -> float:
    """The largest absolute difference over all output tensors (inf on a structure or shape mismatch)."""
    want, got = tensors_of(expected), tensors_of(actual)
    if len(want) != len(got) or not want:
        return math.inf
    worst = 0.0
    for a, b in zip(want, got):
        if a.shape != b.shape:
            return math.inf
        if a.numel():
            worst = max(worst, (a.detach().float() - b.detach().float()).abs().max().item())
    return worst


def _first_line(error: BaseException, limit: int = 160) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = f"{type(error).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _assumption(error: BaseException) -> str:
    match = re.search(r"assuming (.+?), but for this input", str(error))
    return match.group(1) if match else _first_line(error)


def policy_text(built: Built, policy: Optional[Policy]) -> str:
    """The policy and the leaf / non-leaf choices that go with it."""
    parts = [repr(policy) if policy is not None else "?"]
    if built.leaf_modules:
        parts.append("leaf: " + ", ".join(t.__name__ for t in built.leaf_modules))
    if built.nonleaf:
        parts.append("non-leaf: " + ", ".join(t.__name__ for t in built.nonleaf))
    return "; ".join(parts)


def symbolic_column(built: Built) -> str:
    """Plain torch.fx on the same root (same leaf choices): 'ok', 'ok, wrong', or the error."""
    try:
        if built.nonleaf or built.leaf_modules:
            tracer = _fx_tracer(built.leaf_modules, built.nonleaf)
            graph = tracer.trace(built.model, concrete_args=built.concrete_args)
            sgm = torch.fx.GraphModule(tracer.root, graph)
        else:
            sgm = torch.fx.symbolic_trace(built.model, concrete_args=built.concrete_args)
    except Exception as error:
        return "FAIL " + type(error).__name__
    try:
        expected, actual = run_pair(built, sgm, built.example)
    except Exception as error:
        return "ok, then fails to run: " + type(error).__name__
    diff = max_abs_diff(expected, actual)
    return "ok" if diff <= 1e-4 else f"ok, but differs from eager ({diff:.2g})"


def run_case(case: Case, report: Callable[[Dict[str, Any]], None] = lambda r: None) -> Dict[str, Any]:
    """Trace one case both ways and check it; ``report`` receives the partial result after
    each stage (the subprocess driver uses it to say where a crash happened).

    The case's own policy is tried first; when it is ``None`` or fails, the ladder
    (narrowest first) is tried and the first policy that traces is reported."""
    result: Dict[str, Any] = {"model": case.name, "group": case.group, "note": case.note,
                              "symbolic_trace": "", "specfx": "", "nodes": None, "specializations": {},
                              "policy": "", "max_abs_diff": None, "fresh_ran": 0, "fresh_rejected": [],
                              "guard": "", "trace_seconds": None}
    if not available(case):
        result["specfx"] = result["symbolic_trace"] = f"skipped ({case.requires} not importable)"
        return result
    built = case.build()
    result["policy"] = policy_text(built, built.policy)
    result["stage"] = "symbolic_trace"
    report(result)
    result["symbolic_trace"] = symbolic_column(built)
    result["stage"] = "specfx.trace"
    policies = ([built.policy] if built.policy is not None else []) + [p for p in LADDER if p != built.policy]
    gm, first_error = None, None
    for index, policy in enumerate(policies):
        result["policy"] = policy_text(built, policy)
        report(result)  # a crash is then reported with the policy being tried
        started = time.perf_counter()
        try:
            gm = trace_built(built, policy)
        except Exception as error:
            first_error = first_error or error
            last_error = error
            continue
        result["trace_seconds"] = round(time.perf_counter() - started, 3)
        if index and built.policy is not None:
            failed = _first_line(first_error, 90)
            result["policy"] += f" (ladder; the preferred {built.policy!r} failed: {failed})"
        elif index or built.policy is None:
            result["policy"] += " (ladder)"
        break
    if gm is None:
        result["specfx"] = "FAIL " + _first_line(last_error)
        result["error_where"] = _error_location(last_error)
        result.pop("stage", None)
        return result
    result["specfx"] = "ok"
    result["nodes"] = len(gm.graph.nodes)
    result["specializations"] = dict(sorted(collections.Counter(s.kind for s in gm.specializations).items()))
    result["stage"] = "running the graph"
    report(result)
    worst = 0.0
    for call in [built.example] + built.fresh:
        try:
            expected, actual = run_pair(built, gm, call)
        except specfx.GuardError as error:  # another shape under a shape-specializing policy
            result["fresh_rejected"].append(_assumption(error))
            continue
        worst = max(worst, max_abs_diff(expected, actual))
        result["fresh_ran"] += 1
    result["max_abs_diff"] = worst if result["fresh_ran"] else None
    result["guard"] = _guard_column(built, gm)
    result.pop("stage", None)
    return result


def _guard_column(built: Built, gm: Callable[..., Any]) -> str:
    """Run the graph on the input that changes a specialized decision: a GuardError is the
    right answer; else the graph must still match eager (then nothing depended on it)."""
    if built.guard_input is None:
        return "- (no input-dependent decision to flip)" if gm.specializations else "- (no specializations)"
    call, what = built.guard_input
    reference = built.reference or built.model
    try:
        with torch.set_grad_enabled(built.grad):
            torch.manual_seed(0)
            actual = gm(*_clone(call[0]), **_clone(call[1]))
    except specfx.GuardError as error:
        fired = f"{what}: GuardError ({_assumption(error)})"
        try:
            with torch.set_grad_enabled(built.grad):
                reference(*_clone(call[0]), **_clone(call[1]))
        except Exception as eager_error:
            return fired + f"; eager raises {type(eager_error).__name__}"
        return fired + "; eager runs (other path)"
    except Exception as error:
        return f"{what}: graph raised {_first_line(error, 80)} (no guard)"
    try:
        with torch.set_grad_enabled(built.grad):
            torch.manual_seed(0)
            expected = reference(*_clone(call[0]), **_clone(call[1]))
    except Exception as error:
        return f"{what}: graph ran but eager raises {type(error).__name__} (no guard)"
    diff = max_abs_diff(expected, actual)
    if diff <= 1e-4:
        return f"{what}: no guard needed, graph matches eager"
    return f"{what}: NOT guarded and differs from eager ({diff:.2g})"


def _error_location(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if "/specfx/" not in frame.filename and "/torch/fx/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}: {frame.line}"
    return ""


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------


def _run_isolated(case: Case, timeout: float) -> Dict[str, Any]:
    """Run one case in a subprocess; a crash is reported with the stage it happened in."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", case.name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": case.name, "group": case.group, "note": case.note, "symbolic_trace": "?",
                "specfx": f"timeout after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"model": case.name, "group": case.group, "note": case.note}
    if done.returncode != 0:
        stage = result.pop("stage", "startup")
        reason = _signal_name(done.returncode)
        column = "specfx" if stage in ("specfx.trace", "running the graph") else "symbolic_trace"
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', done.stderr)
        where = f" at {_short_path(frames[0][0])}:{frames[0][1]} {frames[0][2]}" if frames else ""
        if stage == "running the graph":
            result["specfx"] = f"traced, then CRASH ({reason}) running it{where}"
        else:
            result[column] = f"CRASH ({reason}){where}"
        if column == "symbolic_trace":
            result["specfx"] = "not run"
        result["crash_stack"] = [f"{_short_path(f)}:{n} {fn}" for f, n, fn in frames[:8]]
    result.pop("stage", None)
    return result


def _short_path(path: str) -> str:
    for marker in ("site-packages/", os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _format_table(results: Sequence[Dict[str, Any]]) -> str:
    header = ["model", "symbolic_trace", "specfx", "nodes", "specializations", "policy", "max|diff|",
              "guard on a changed path"]
    rows = []
    for r in results:
        specs = " ".join(f"{k}:{v}" for k, v in (r.get("specializations") or {}).items()) or "-"
        diff = r.get("max_abs_diff")
        diff_text = "-" if diff is None else ("inf" if diff == math.inf else f"{diff:.1e}")
        if r.get("nodes") is not None:
            ran, rejected = r.get("fresh_ran", 0), r.get("fresh_rejected") or []
            diff_text += f" ({ran}/{ran + len(rejected)} inputs)"
            if rejected:
                diff_text += f"; guard rejected {len(rejected)}: {rejected[0]}"
        rows.append([r["model"], r.get("symbolic_trace", ""), r.get("specfx", ""),
                     "-" if r.get("nodes") is None else str(r["nodes"]), specs if r.get("nodes") else "-",
                     r.get("policy", ""), diff_text, r.get("guard", "") or "-"])
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    widths = [min(w, 70) for w in widths]

    def fmt(row):
        cells = []
        for value, width in zip(row, widths):
            text = str(value)
            if len(text) > width:
                text = text[: width - 1] + "…"
            cells.append(text.ljust(width))
        return "  ".join(cells).rstrip()

    lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]
    notes = [f"  {r['model']}: {r['note']}" for r in results if r.get("note")]
    failures = []
    for r in results:
        if str(r.get("specfx", "")).startswith(("FAIL", "CRASH", "traced, then")):
            where = f"\n      at {_short_path(r['error_where'])}" if r.get("error_where") else ""
            stack = ("\n      stack: " + " <- ".join(r["crash_stack"][:4])) if r.get("crash_stack") else ""
            failures.append(f"  {r['model']} with {r.get('policy')}: {r.get('specfx')}{where}{stack}")
    out = "\n".join(lines)
    if failures:
        out += "\n\nspecfx failures (full text):\n" + "\n".join(failures)
    out += "\n\nnotes:\n" + "\n".join(notes)
    return out


def select(patterns: Optional[Sequence[str]]) -> List[Case]:
    """The cases whose names match any of the patterns (all when none)."""
    if not patterns:
        return list(CASES)
    def matches(case: Case, pattern: str) -> bool:
        return case.name == pattern or fnmatch.fnmatchcase(case.name, pattern)

    chosen = [case for case in CASES if any(matches(case, p) for p in patterns)]
    unknown = [p for p in patterns if not any(matches(c, p) for c in CASES)]
    if unknown:
        raise SystemExit(f"zoo.py: unknown model(s) {', '.join(unknown)}; see --list")
    return chosen


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", metavar="NAME", help="model names or globs (default: all)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--in-process", action="store_true", help="run every model in this process")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per model (subprocess mode)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        import faulthandler

        faulthandler.enable()  # a crash prints the Python stack: the driver reports its innermost frame
        case = CASES_BY_NAME[options.worker]

        def report(partial):
            print(json.dumps(partial, default=str), flush=True)

        try:
            result = run_case(case, report)
        except Exception as error:  # a builder failed: still a result row
            result = {"model": case.name, "group": case.group, "note": case.note,
                      "symbolic_trace": "?", "specfx": "ERROR building the model: " + _first_line(error)}
        print(json.dumps(result, default=str), flush=True)
        return 0
    if options.list:
        for case in CASES:
            flag = "" if available(case) else f"   (needs {case.requires})"
            print(f"{case.name:32s} {case.group:12s} {case.note[:90]}{flag}")
        return 0
    results = []
    for case in select(options.models):
        if not options.json:
            print(f"... {case.name}", file=sys.stderr, flush=True)
        if options.in_process:
            result = run_case(case)
            result.pop("stage", None)
        else:
            result = _run_isolated(case, options.timeout)
        results.append(result)
    if options.json:
        print(json.dumps(results, indent=2, default=str))
    else:
        print(_format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
