"""Every model the benchmark scripts measure, in one place.

``tools/bench/suite.py`` (trace time, memory, guard cost, scaling), ``tools/bench/guard_overhead.py``
(forward cost of guards) and ``tools/bench/specializer_overhead.py`` (``Specializer`` overhead)
import their models from here, so that a number in ``docs/benchmarks.md`` names one
definition. Models only: no timing code.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

# the README's seed example (split, then *-unpack into a call): one definition, the demo's
from specfx.cli.demo import TestModule

__all__ = [
    "BertLike", "Chain", "ChainBlock", "GatedMLP", "GuardedCNN", "GuardedTransformer", "MultiInput",
    "ResNetLike", "ResidualNormBlocks", "SmallMLP", "SmallResNet", "TestModule", "sequential_mlp_blocks",
]


# -- ResNet-50 and BERT layouts (tools/bench/suite.py) ------------------------------------------


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 convolutions with BatchNorm and a (projected) shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNetLike(nn.Module):
    """ResNet-50's layout (stem, bottleneck stages of 3/4/6/3 blocks, 50 weight
    layers) at a base width of ``width`` channels instead of 64."""

    def __init__(self, width: int = 32, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, inplanes = [], width
        for index, blocks in enumerate((3, 4, 6, 3)):
            planes = width * 2**index
            stage = []
            for block in range(blocks):
                stage.append(Bottleneck(inplanes, planes, stride=2 if block == 0 and index > 0 else 1))
                inplanes = planes * 4
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, length, hidden = x.size()
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / self.head_dim**0.5
        if mask is not None:
            scores = scores + mask
        probs = self.dropout(scores.softmax(dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(batch, length, hidden)
        return self.out(context)


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask)))
        return self.norm2(x + self.dropout(self.ffn_out(nn.functional.gelu(self.ffn_in(x)))))


class BertLike(nn.Module):
    """BERT's encoder (word/position/token-type embeddings, post-norm layers,
    an optional additive attention mask) at a smaller width."""

    def __init__(self, layers: int = 12, hidden: int = 256, heads: int = 4, intermediate: int = 1024,
                 vocab: int = 30522, max_positions: int = 512) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, length = input_ids.size()
        positions = torch.arange(length, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.dropout(self.norm(x))
        mask = None
        if attention_mask is not None:
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x


# -- deep models of small tensors, where per-op overhead shows (the trace-time targets) ---


class _NormLinearGelu(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(self.norm(x)))


class ResidualNormBlocks(nn.Module):
    """``blocks`` residual blocks ``x + GELU(Linear(LayerNorm(x)))``: the first
    trace-time target model, res-norm-200 (200 blocks, width 32, input 4x32)."""

    def __init__(self, blocks: int = 200, width: int = 32) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_NormLinearGelu(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class _MLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.relu1 = nn.Linear(width, width), nn.ReLU()
        self.fc2, self.relu2 = nn.Linear(width, width), nn.ReLU()
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.relu2(self.fc2(self.relu1(self.fc1(x)))))


def sequential_mlp_blocks(blocks: int = 100, width: int = 64) -> nn.Sequential:
    """``nn.Sequential`` of ``blocks`` blocks Linear → ReLU → Linear → ReLU → add → LayerNorm:
    the second trace-time target model, mlp-seq-100 (100 blocks, width 64, input 8x64)."""
    return nn.Sequential(*(_MLPBlock(width) for _ in range(blocks)))


class ChainBlock(nn.Module):
    """Five ops and one decision: the unpack is guarded, with its source line."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2)  # chunk, getitem, getitem
        return torch.cat([torch.relu(b), a])  # relu, cat


class Chain(nn.Module):
    """``n`` ops in a row: ``n // 5`` submodules of five ops each, so that the
    per-node cost includes guards, source lines, node names and scope lookups."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(ChainBlock() for _ in range(max(1, n // 5))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


# -- models that take a decision in every layer (tools/bench/guard_overhead.py) -----------------


class _GuardedConvBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left, right = torch.chunk(x, 2, dim=1)  # unpack guard
        y = torch.cat([right, left], dim=1)
        if x.shape[0] > 1:  # BOOL guard on a shape predicate
            y = y + 0.0
        return torch.relu(x + self.bn(self.conv(y)))


class GuardedCNN(nn.Module):
    """A ``depth``-block CNN with an unpack and a shape predicate in every block."""

    def __init__(self, depth: int = 50, channels: int = 32) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(_GuardedConvBlock(channels) for _ in range(depth))
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((2, 3)))


class _GuardedEncoderLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)

    def _split(self, t: torch.Tensor, batch: int, length: int, width: int) -> torch.Tensor:
        return t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, length, width = x.shape  # unpack guard on the shape tuple
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)  # unpack guard
        q, k, v = (self._split(t, batch, length, width) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (width // self.heads) ** 0.5
        if mask is not None:  # identity guard on the mask input
            scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        attention = scores.softmax(-1) @ v
        x = x + self.out(attention.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GuardedTransformer(nn.Module):
    """A ``depth``-layer encoder with unpacks and an optional mask in every layer."""

    def __init__(self, depth: int = 12, width: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_GuardedEncoderLayer(width, heads) for _ in range(depth))

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return x


# -- Specializer workloads (tools/bench/specializer_overhead.py, suite.py's prologue target) -------


class SmallMLP(nn.Module):
    """A two-layer MLP with a shape predicate: a ~tens of microseconds forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        if x.shape[0] > 1:
            y = y - y.mean(0)
        return self.b(y)


class _SmallBottleneck(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, channels // 4, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels // 4)
        self.conv = nn.Conv2d(channels // 4, channels // 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels // 4)
        self.expand = nn.Conv2d(channels // 4, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.reduce(x)))
        y = torch.relu(self.bn2(self.conv(y)))
        return torch.relu(x + self.bn3(self.expand(y)))


class SmallResNet(nn.Module):
    """``blocks`` bottlenecks and a shape-dependent head."""

    def __init__(self, blocks: int = 16, channels: int = 64) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.Sequential(*[_SmallBottleneck(channels) for _ in range(blocks)])
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        if x.shape[-1] > 1:
            x = x.mean((2, 3))
        else:
            x = x.flatten(1)
        return self.head(x)


class GatedMLP(nn.Module):
    """Takes one of two paths depending on the data: a guard-changing workload."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.sum() > 0:
            return torch.relu(y) * 2
        return torch.tanh(y)


class MultiInput(nn.Module):
    """Four tensor inputs, each with a decision on its shape (one guarded input
    each): the Specializer's prologue checks every input."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for x in (a, b, c, d):
            total = total + (x.sum() if x.shape[0] > 1 else -x.sum())
        return total
