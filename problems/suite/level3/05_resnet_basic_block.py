"""ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus identity shortcut, then ReLU (eval mode, fp32)."""

import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 56
WIDTH = 56

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["cnn", "resnet", "conv", "batchnorm", "residual"],
    "flops": 59190018048,
    "bytes": 103944208,
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 10, "WIDTH": 12},
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
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = _trained_bn(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = _trained_bn(channels)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, HEIGHT // 2 + 1, WIDTH - 3)]]
