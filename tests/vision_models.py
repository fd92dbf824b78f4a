"""Vision models as torchvision and timm build them, small: the published architectures
(patch-embedding ViT, DenseNet, MobileViT, Swin window attention, EfficientNet MBConv),
written for these tests with the patterns that matter to a tracer: shapes unpacked and
formatted into assertion messages, a feature list that grows, patch counts computed from
the resolution, padding to a window multiple, casts to the parameters' dtype."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class PatchViT(nn.Module):
    """ViT: conv patchify, class token, encoder, head; the input size is checked with torch._assert
    and a formatted message (as torchvision's VisionTransformer._process_input)."""

    def __init__(self, image_size=16, patch_size=4, hidden=32, layers=2, heads=4, classes=10):
        super().__init__()
        self.image_size, self.patch_size, self.hidden = image_size, patch_size, hidden
        self.conv_proj = nn.Conv2d(3, hidden, patch_size, patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        seq = (image_size // patch_size) ** 2 + 1
        self.pos = nn.Parameter(torch.randn(1, seq, hidden) * 0.02)
        self.encoder = nn.ModuleList([_EncoderBlock(hidden, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def _process_input(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        torch._assert(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
        torch._assert(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
        n_h = h // p
        n_w = w // p
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden, n_h * n_w)
        return x.permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        n = x.shape[0]
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        torch._assert(x.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {x.shape}")
        x = x + self.pos
        for block in self.encoder:
            x = block(x)
        x = self.ln(x)
        return self.head(x[:, 0])


class _EncoderBlock(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden * 2), nn.GELU(), nn.Linear(hidden * 2, hidden))

    def forward(self, input):
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        x = self.ln_1(input)
        x, _ = self.attn(x, x, x, need_weights=False)
        x = x + input
        return x + self.mlp(self.ln_2(x))


class TimmPatchEmbed(nn.Module):
    """timm-style patch embedding: asserts with an f-string, flatten(2).transpose."""

    def __init__(self, img_size=16, patch=4, dim=32, strict=True):
        super().__init__()
        self.img_size, self.strict = (img_size, img_size), strict
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        B, C, H, W = x.shape
        if self.strict:
            assert H == self.img_size[0], f"Input height ({H}) doesn't match model ({self.img_size[0]})."
            assert W == self.img_size[1], "Input width (%d) doesn't match model (%d)." % (W, self.img_size[1])
        return self.proj(x).flatten(2).transpose(1, 2)


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, growth, 3, padding=1, bias=False)

    def forward(self, inputs):
        prev = torch.cat(inputs, 1) if isinstance(inputs, list) else inputs
        return self.conv(F.relu(self.norm(prev)))


class DenseBlock(nn.ModuleDict):
    """DenseNet: a list holding the input, each layer reads the whole list, its output is appended."""

    def __init__(self, layers, cin, growth):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(cin + i * growth, growth))

    def forward(self, init_features):
        features = [init_features]
        for _name, layer in self.items():
            new_features = layer(features)
            features.append(new_features)
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, growth=4, blocks=(2, 2), classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        mods, c = [], 8
        for i, n in enumerate(blocks):
            mods.append(DenseBlock(n, c, growth))
            c += n * growth
            if i != len(blocks) - 1:
                mods.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1), nn.AvgPool2d(2)))
                c //= 2
        self.features = nn.Sequential(*mods)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        f = self.features(self.stem(x))
        out = F.adaptive_avg_pool2d(F.relu(f), (1, 1))
        return self.classifier(torch.flatten(out, 1))


class MobileViTBlock(nn.Module):
    """MobileViT: local conv, unfold into patches, transformer over patches, fold back.
    Reads `features.shape` as a whole and computes patch counts from it."""

    def __init__(self, c=8, d=16, patch=2):
        super().__init__()
        self.patch_h = self.patch_w = patch
        self.local = nn.Conv2d(c, d, 3, padding=1)
        self.mix = nn.Linear(d, d)
        self.proj = nn.Conv2d(d, c, 1)

    def unfolding(self, features):
        patch_width, patch_height = self.patch_w, self.patch_h
        patch_area = int(patch_width * patch_height)
        batch_size, channels, orig_height, orig_width = features.shape
        new_height = int(math.ceil(orig_height / patch_height) * patch_height)
        new_width = int(math.ceil(orig_width / patch_width) * patch_width)
        interpolate = False
        if new_width != orig_width or new_height != orig_height:
            features = F.interpolate(features, size=(new_height, new_width), mode="bilinear", align_corners=False)
            interpolate = True
        num_patch_width = new_width // patch_width
        num_patch_height = new_height // patch_height
        num_patches = num_patch_height * num_patch_width
        patches = features.reshape(batch_size * channels * num_patch_height, patch_height, num_patch_width, patch_width)
        patches = patches.transpose(1, 2)
        patches = patches.reshape(batch_size, channels, num_patches, patch_area)
        patches = patches.transpose(1, 3)
        patches = patches.reshape(batch_size * patch_area, num_patches, -1)
        info = {"orig_size": (orig_height, orig_width), "batch_size": batch_size, "channels": channels,
                "interpolate": interpolate, "num_patches": num_patches,
                "num_patches_width": num_patch_width, "num_patches_height": num_patch_height}
        return patches, info

    def folding(self, patches, info):
        patch_width, patch_height = self.patch_w, self.patch_h
        patch_area = int(patch_width * patch_height)
        batch_size = info["batch_size"]
        channels = info["channels"]
        num_patches = info["num_patches"]
        num_patch_height = info["num_patches_height"]
        num_patch_width = info["num_patches_width"]
        features = patches.contiguous().view(batch_size, patch_area, num_patches, -1)
        features = features.transpose(1, 3)
        features = features.reshape(batch_size * channels * num_patch_height, num_patch_width, patch_height, patch_width)
        features = features.transpose(1, 2)
        features = features.reshape(batch_size, channels, num_patch_height * patch_height, num_patch_width * patch_width)
        if info["interpolate"]:
            features = F.interpolate(features, size=info["orig_size"], mode="bilinear", align_corners=False)
        return features

    def forward(self, x):
        f = self.local(x)
        patches, info = self.unfolding(f)
        patches = patches + self.mix(patches)
        return x + self.proj(self.folding(patches, info))


class WindowAttention(nn.Module):
    """Swin: pads to a multiple of the window, partitions into windows, attends, reverses."""

    def __init__(self, dim=16, window=4):
        super().__init__()
        self.window = window
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # x: (B, H, W, C)
        B, H, W, C = x.shape
        w = self.window
        pad_r = (w - W % w) % w
        pad_b = (w - H % w) % w
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        _, Hp, Wp, _ = x.shape
        x = x.view(B, Hp // w, w, Wp // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, C)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C), dim=-1) @ v
        x = self.proj(a).view(B, Hp // w, Wp // w, w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(B, Hp, Wp, C)
        return x[:, :H, :W, :].contiguous()


class PaddedWindowAttention(WindowAttention):
    """Swin as transformers writes it: pads only when the size is not a window multiple and
    crops back only if it padded (`was_padded = pad_values[3] > 0 or pad_values[5] > 0`), a
    branch on the input's size that eager takes one way or the other."""

    def forward(self, x):  # x: (B, H, W, C)
        B, H, W, C = x.shape
        w = self.window
        pad_values = (0, 0, 0, (w - W % w) % w, 0, (w - H % w) % w)
        x = F.pad(x, pad_values)
        _, Hp, Wp, _ = x.shape
        x = x.view(B, Hp // w, w, Wp // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, C)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C), dim=-1) @ v
        x = self.proj(a).view(B, Hp // w, Wp // w, w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(B, Hp, Wp, C)
        was_padded = pad_values[3] > 0 or pad_values[5] > 0
        if was_padded:
            x = x[:, :H, :W, :].contiguous()
        return x


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(F.silu(self.fc1(s))))


class MBConv(nn.Module):
    """EfficientNet: expand, depthwise, squeeze-excite, project; stochastic depth in training."""

    def __init__(self, c, expand=4, stride=1):
        super().__init__()
        h = c * expand
        self.use_res = stride == 1
        self.block = nn.Sequential(nn.Conv2d(c, h, 1), nn.BatchNorm2d(h), nn.SiLU(),
                                   nn.Conv2d(h, h, 3, stride, 1, groups=h), nn.BatchNorm2d(h), nn.SiLU(),
                                   SqueezeExcite(h), nn.Conv2d(h, c, 1), nn.BatchNorm2d(c))

    def forward(self, x):
        out = self.block(x)
        if self.use_res:
            out = out + x
        return out


class EfficientNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.blocks = nn.Sequential(MBConv(8), MBConv(8))
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class CastToWeight(nn.Module):
    """Casts its input to the parameters' dtype and device (as HF RMSNorm / timm do)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        x = x.to(self.lin.weight.dtype)
        y = torch.zeros(x.shape[0], 4, device=x.device, dtype=x.dtype)
        return self.lin(x) + y
