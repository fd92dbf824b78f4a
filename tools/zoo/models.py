"""The zoo's models: what ``tools/zoo/run.py`` traces and ``tests/test_zoo.py`` checks.

Every entry builds a model with random weights and tiny sizes (no downloads,
``HF_HUB_OFFLINE=1``) together with its example input and the other inputs the
one graph must cover:

- transformers architectures (``ARCHITECTURES``: encoders, decoders,
  encoder-decoders, vision, audio, mixture-of-experts) called as users call
  them, ``model(**batch)``, with the default config but for its sizes; they
  run when ``transformers`` is importable (4.57.x and 5.x);
- hand-written equivalents of timm's ResNet bottleneck stage, ConvNeXt block,
  ViT block and Swin block (window partition / cyclic shift / padding / dynamic
  attention mask), written after timm 1.0's code: timm needs torchvision, which
  has no wheel for the CPU torch 2.13 build; the timm models themselves run
  when timm is importable;
- torch.nn built-ins (MultiheadAttention, TransformerEncoder, LSTM, GRU).

Keep builders cheap: the CI subset in ``tests/test_zoo.py`` builds them all the time.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch
import torch.nn.functional as F
from torch import nn

from specfx import Policy

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
# The zoo's entries
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
    nonleaf: Tuple[type, ...] = ()  # torch.nn types traced through (trace_through=)
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


# ---------------------------------------------------------------------------------------
# HuggingFace transformers architectures, built from tiny configs (random weights), traced
# as users call them: ``model(**batch)`` is the root, the config is the default one but for
# its sizes. A right-padded calibration batch, another batch size and length padded
# differently, and an unpadded batch of one.
# ---------------------------------------------------------------------------------------


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def _token_batch(batch: int, length: int, pads: Sequence[int], vocab: int = 99) -> Dict[str, torch.Tensor]:
    """Token ids (never the pad id 0..2) and a right-padded 2-D attention mask: row ``r`` ends in
    ``pads[r]`` padding tokens."""
    ids = torch.randint(3, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, pad in enumerate(pads):
        if pad:
            mask[row, length - pad:] = 0
            ids[row, length - pad:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def text_inputs(batch: int, length: int, pads: Sequence[int]) -> Dict[str, torch.Tensor]:
    return _token_batch(batch, length, pads)


def seq2seq_inputs(batch: int, length: int, pads: Sequence[int]) -> Dict[str, torch.Tensor]:
    inputs = _token_batch(batch, length, pads)
    inputs["decoder_input_ids"] = torch.randint(3, 99, (batch, max(2, length - 2)))
    return inputs


def image_inputs(batch: int, length: int, pads: Sequence[int]) -> Dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(batch, 3, 32, 32)}


def speech_inputs(batch: int, length: int, pads: Sequence[int]) -> Dict[str, torch.Tensor]:
    """Whisper: log-mel features of the fixed length the config expects, and decoder ids."""
    return {"input_features": torch.randn(batch, 16, 60), "decoder_input_ids": torch.randint(3, 99, (batch, length))}


def waveform_inputs(batch: int, length: int, pads: Sequence[int]) -> Dict[str, torch.Tensor]:
    return {"input_values": torch.randn(batch, 400 + 40 * length)}


# (batch, length, padding per row): the calibration batch, another size padded differently, one unpadded row
CALIBRATION = (2, 8, (0, 3))
OTHER_SIZE = (3, 5, (2, 0, 1))
BATCH_OF_ONE = (1, 6, (0,))

_SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
              max_position_embeddings=64)
_DECODER = dict(_SMALL, num_key_value_heads=2)
_SEQ2SEQ = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64)
_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=32,
            patch_size=8)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A transformers architecture: its family, model and config classes, tiny sizes, inputs."""

    name: str
    family: str  # encoder, decoder, encoder-decoder, vision, audio, mixture-of-experts
    model: str  # class name in transformers
    config: str
    sizes: Dict[str, Any]
    inputs: Callable[[int, int, Sequence[int]], Dict[str, torch.Tensor]]
    leaf: Tuple[str, ...] = ()  # module class names made leaves (the routing-generic MoE graph)

    def build_model(self) -> nn.Module:
        transformers = _transformers()
        torch.manual_seed(0)
        config = getattr(transformers, self.config)(**self.sizes)
        return getattr(transformers, self.model)(config).eval()

    def leaf_types(self, model: nn.Module) -> Tuple[type, ...]:
        return tuple({type(m) for m in model.modules() if type(m).__name__ in self.leaf})


ARCHITECTURES: List[Architecture] = [
    # encoders
    Architecture("bert", "encoder", "BertModel", "BertConfig", _SMALL, text_inputs),
    Architecture("distilbert", "encoder", "DistilBertModel", "DistilBertConfig",
                 dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64),
                 text_inputs),
    Architecture("roberta", "encoder", "RobertaModel", "RobertaConfig", _SMALL, text_inputs),
    Architecture("xlm-roberta", "encoder", "XLMRobertaModel", "XLMRobertaConfig", _SMALL, text_inputs),
    Architecture("albert", "encoder", "AlbertModel", "AlbertConfig", dict(_SMALL, embedding_size=16), text_inputs),
    Architecture("electra", "encoder", "ElectraModel", "ElectraConfig", dict(_SMALL, embedding_size=16),
                 text_inputs),
    Architecture("deberta-v2", "encoder", "DebertaV2Model", "DebertaV2Config", _SMALL, text_inputs),
    Architecture("mpnet", "encoder", "MPNetModel", "MPNetConfig", _SMALL, text_inputs),
    # decoders
    Architecture("gpt2", "decoder", "GPT2Model", "GPT2Config",
                 dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64), text_inputs),
    Architecture("llama", "decoder", "LlamaModel", "LlamaConfig", _DECODER, text_inputs),
    Architecture("mistral", "decoder", "MistralModel", "MistralConfig", _DECODER, text_inputs),
    Architecture("qwen2", "decoder", "Qwen2Model", "Qwen2Config", _DECODER, text_inputs),
    Architecture("qwen3", "decoder", "Qwen3Model", "Qwen3Config", dict(_DECODER, head_dim=8), text_inputs),
    Architecture("phi", "decoder", "PhiModel", "PhiConfig", _DECODER, text_inputs),
    Architecture("phi3", "decoder", "Phi3Model", "Phi3Config", dict(_DECODER, pad_token_id=0), text_inputs),
    Architecture("gemma", "decoder", "GemmaModel", "GemmaConfig", dict(_DECODER, head_dim=8), text_inputs),
    Architecture("gpt-neox", "decoder", "GPTNeoXModel", "GPTNeoXConfig", _SMALL, text_inputs),
    Architecture("opt", "decoder", "OPTModel", "OPTConfig",
                 dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                      max_position_embeddings=64, word_embed_proj_dim=32), text_inputs),
    Architecture("falcon", "decoder", "FalconModel", "FalconConfig",
                 dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4), text_inputs),
    Architecture("bloom", "decoder", "BloomModel", "BloomConfig",
                 dict(vocab_size=99, hidden_size=32, n_layer=2, n_head=4), text_inputs),
    Architecture("gptj", "decoder", "GPTJModel", "GPTJConfig",
                 dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64), text_inputs),
    # encoder-decoders
    Architecture("t5", "encoder-decoder", "T5Model", "T5Config",
                 dict(vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                      decoder_start_token_id=0), seq2seq_inputs),
    Architecture("bart", "encoder-decoder", "BartModel", "BartConfig", _SEQ2SEQ, seq2seq_inputs),
    Architecture("marian", "encoder-decoder", "MarianModel", "MarianConfig",
                 dict(_SEQ2SEQ, pad_token_id=0, decoder_start_token_id=0), seq2seq_inputs),
    Architecture("mbart", "encoder-decoder", "MBartModel", "MBartConfig", _SEQ2SEQ, seq2seq_inputs),
    # vision
    Architecture("vit", "vision", "ViTModel", "ViTConfig", _VIT, image_inputs),
    Architecture("deit", "vision", "DeiTModel", "DeiTConfig", _VIT, image_inputs),
    Architecture("swin", "vision", "SwinModel", "SwinConfig",
                 dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
                 image_inputs),
    Architecture("convnext", "vision", "ConvNextModel", "ConvNextConfig",
                 dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2), image_inputs),
    Architecture("resnet", "vision", "ResNetModel", "ResNetConfig",
                 dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]), image_inputs),
    # audio
    Architecture("whisper", "audio", "WhisperModel", "WhisperConfig",
                 dict(_SEQ2SEQ, num_mel_bins=16, max_source_positions=30, max_target_positions=64, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, decoder_start_token_id=1), speech_inputs),
    Architecture("wav2vec2", "audio", "Wav2Vec2Model", "Wav2Vec2Config",
                 dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                      conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=2), waveform_inputs),
    # mixture of experts: routing decided on the calibration batch (guarded), and routing-generic;
    # expert sizes a multiple of 16 bytes (transformers 5 runs the experts with torch._grouped_mm)
    Architecture("mixtral", "mixture-of-experts", "MixtralModel", "MixtralConfig",
                 dict(_DECODER, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2), text_inputs),
    Architecture("mixtral[moe-leaf]", "mixture-of-experts", "MixtralModel", "MixtralConfig",
                 dict(_DECODER, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2), text_inputs,
                 leaf=("MixtralSparseMoeBlock",)),
    Architecture("qwen2-moe", "mixture-of-experts", "Qwen2MoeModel", "Qwen2MoeConfig",
                 dict(_DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      shared_expert_intermediate_size=16), text_inputs),
    Architecture("qwen2-moe[moe-leaf]", "mixture-of-experts", "Qwen2MoeModel", "Qwen2MoeConfig",
                 dict(_DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                      shared_expert_intermediate_size=16), text_inputs, leaf=("Qwen2MoeSparseMoeBlock",)),
]
ARCHITECTURES_BY_NAME = {a.name: a for a in ARCHITECTURES}


def build_architecture(arch: Architecture) -> Built:
    """The model, its calibration batch, and the other inputs the one graph must cover."""
    model = arch.build_model()
    torch.manual_seed(1)
    example = ((), arch.inputs(*CALIBRATION))
    fresh = [((), arch.inputs(*OTHER_SIZE)), ((), arch.inputs(*BATCH_OF_ONE))]
    return Built(model, example, fresh, None, leaf_modules=arch.leaf_types(model))


def _architecture_case(arch: Architecture) -> "Case":
    note = f"{arch.family}: transformers.{arch.model}(**batch)"
    if arch.leaf:
        note += f", {', '.join(arch.leaf)} a leaf module (routing computed at run time)"
    return Case(f"hf-{arch.name}", "transformers", lambda: build_architecture(arch), "transformers", note)

def llama_config(layers: int = 2, hidden: int = 32, intermediate: int = 64, heads: int = 4, kv_heads: int = 2,
                 vocab: int = 100, attn_implementation: str = "sdpa"):
    """A Llama config of the given sizes (``tools/zoo/meta_llm.py`` builds Llama-2-7B shapes with it)."""
    transformers = _transformers()
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                                    num_hidden_layers=layers, num_attention_heads=heads,
                                    num_key_value_heads=kv_heads, max_position_embeddings=4096,
                                    use_cache=False, attn_implementation=attn_implementation)


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


CASES: List[Case] = [
    # -- transformers ---------------------------------------------------------------------
    *[_architecture_case(arch) for arch in ARCHITECTURES],
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
         note="nn.TransformerEncoderLayer with its MultiheadAttention traced through (trace_through=)"),
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
         note="nn.LSTM traced through (trace_through=); BOOL only inside the rnn scope"),
    Case("nn-gru", "torch.nn", _build_rnn("gru", nonleaf=False),
         note="nn.GRU inside a model, as a leaf (default)"),
    Case("nn-gru[non-leaf]", "torch.nn", _build_rnn("gru", nonleaf=True),
         note="nn.GRU traced through (trace_through=); BOOL only inside the rnn scope"),
]
CASES_BY_NAME = {case.name: case for case in CASES}
