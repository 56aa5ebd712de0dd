"""MobileNetV2 inverted residual block: 1x1 expand, 3x3 depthwise, 1x1 project, BN (eval) and ReLU6, with skip (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
CHANNELS = 64
EXPANSION = 6
HEIGHT = 56
WIDTH = 56

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["cnn", "mobilenet", "depthwise", "pointwise", "batchnorm", "residual"],
    "flops": 10558636032,
    "bytes": 51603992,
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 10, "WIDTH": 9},
}


def _trained_bn(channels: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0.0, 0.2)
    return bn


class Model(nn.Module):
    def __init__(self, channels: int, expansion: int):
        super().__init__()
        wide = channels * expansion
        self.expand = nn.Conv2d(channels, wide, 1, bias=False)
        self.bn1 = _trained_bn(wide)
        self.depthwise = nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.bn2 = _trained_bn(wide)
        self.project = nn.Conv2d(wide, channels, 1, bias=False)
        self.bn3 = _trained_bn(channels)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.bn1(self.expand(x)) * 3)
        h = F.relu6(self.bn2(self.depthwise(h)))
        return x + self.bn3(self.project(h))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPANSION]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, HEIGHT // 2 + 1, WIDTH - 5)]]
