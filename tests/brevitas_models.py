"""Tiny replicas of real architectures (random init) for Brevitas' graph PTQ recipe.

Written from the published architectures, each keeping the code patterns its family
is known for: ResNet unpacks ``x.shape``, DenseNet keeps a list of features that
every layer reads whole, MobileNetV3 has hardswish and squeeze-excite, the
torchvision-style ViT prepends a class token after a ``torch._assert`` with an
f-string message. The transformers families are the library's own classes built
from small configs. torchvision and timm cannot load beside the CPU torch, so none of
this imports them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# -- ResNet: basic blocks, a downsampling shortcut, the classifier reads x.shape --------------


class BasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, stride=2), BasicBlock(16, 16))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        b, c, h, w = x.shape  # the shape unpack nearly every vision model has somewhere
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = self.avgpool(x)
        return self.fc(x.reshape(b, -1))


# -- DenseNet: a list of features, the input first, each layer reads the whole list -----------


class DenseLayer(nn.Module):
    def __init__(self, channels: int, growth: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(channels, 2 * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(2 * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

    def bn_function(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        concated = torch.cat(inputs, 1)
        return self.conv1(self.relu1(self.norm1(concated)))

    def forward(self, input):
        prev_features = [input] if isinstance(input, torch.Tensor) else input
        bottleneck = self.bn_function(prev_features)
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, layers: int, channels: int, growth: int):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(channels + i * growth, growth))

    def forward(self, init_features):
        features = [init_features]
        for _name, layer in self.items():
            new_features = layer(features)
            features.append(new_features)
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            DenseBlock(3, 8, 4),
            nn.BatchNorm2d(20),
            nn.Conv2d(20, 10, 1, bias=False),
            nn.AvgPool2d(2, 2),
            DenseBlock(2, 10, 4),
            nn.BatchNorm2d(18),
        )
        self.classifier = nn.Linear(18, num_classes)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        out = F.adaptive_avg_pool2d(out, (1, 1))
        return self.classifier(torch.flatten(out, 1))


# -- MobileNetV3: inverted residuals, hardswish, squeeze-excite with hardsigmoid -------------


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, input):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(input)))))
        return scale * input


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, expanded: int, cout: int, kernel: int, stride: int, se: bool, hardswish: bool):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        activation = nn.Hardswish if hardswish else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers += [nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded), activation()]
        layers += [
            nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded, bias=False),
            nn.BatchNorm2d(expanded),
            activation(),
        ]
        if se:
            layers.append(SqueezeExcitation(expanded, max(8, expanded // 4)))
        layers += [nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class MobileNetV3(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()),
            InvertedResidual(16, 16, 16, 3, 2, True, False),
            InvertedResidual(16, 48, 24, 3, 1, False, False),
            InvertedResidual(24, 64, 24, 5, 1, True, True),
            nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64), nn.Hardswish()),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(64, 32), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, num_classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# -- torchvision-style ViT: patchify with a shape check, class token, encoder blocks ---------


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, input):
        torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = x + input
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int = 16, patch_size: int = 4, dim: int = 32, num_classes: int = 10):
        super().__init__()
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, dim
        self.conv_proj = nn.Conv2d(3, dim, patch_size, patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        seq_length = (image_size // patch_size) ** 2 + 1
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, dim).normal_(std=0.02))
        self.layers = nn.Sequential(EncoderBlock(dim, 4, 2 * dim), EncoderBlock(dim, 4, 2 * dim))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def _process_input(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        torch._assert(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
        torch._assert(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
        n_h, n_w = h // p, w // p
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, n_h * n_w)
        return x.permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        n = x.shape[0]
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


VISION = {"resnet": ResNet, "densenet": DenseNet, "mobilenet_v3": MobileNetV3, "vit": VisionTransformer}


# -- transformers: the library's classes from small configs -----------------------------------

TINY_TEXT = dict(vocab_size=64, hidden_size=32, num_attention_heads=4, intermediate_size=64, max_position_embeddings=32)


def transformers_model(family: str) -> nn.Module:
    """A randomly initialized transformers classifier of ``family``, small enough for the suite."""
    import transformers

    if family == "bert":
        config = transformers.BertConfig(num_hidden_layers=2, **TINY_TEXT)
        return transformers.BertForSequenceClassification(config)
    if family == "distilbert":
        config = transformers.DistilBertConfig(
            vocab_size=64, dim=32, n_heads=4, hidden_dim=64, n_layers=2, max_position_embeddings=32
        )
        return transformers.DistilBertForSequenceClassification(config)
    if family == "mobilebert":
        config = transformers.MobileBertConfig(
            num_hidden_layers=2, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
            num_feedforward_networks=2, **TINY_TEXT,
        )
        return transformers.MobileBertForSequenceClassification(config)
    if family == "dinov2":
        config = transformers.Dinov2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=16, patch_size=4,
            num_labels=5,
        )
        return transformers.Dinov2ForImageClassification(config)
    raise ValueError(f"no tiny {family!r}")


TEXT = ("bert", "distilbert", "mobilebert")
