"""Convolution + batch norm (eval mode) + ReLU, the basic CNN stage (fp32, NCHW)."""

import torch
import torch.nn as nn

BATCH = 16
IN_CH = 64
OUT_CH = 128
HEIGHT = 128
WIDTH = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "batchnorm", "activation", "fusion"],
    "flops": 38654705664,
    "bytes": 201623560,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 16, "HEIGHT": 14, "WIDTH": 12},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_ch)
        with torch.no_grad():
            self.bn.running_mean.normal_(0.0, 0.2)
            self.bn.running_var.uniform_(0.5, 1.5)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.normal_(0.0, 0.2)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, IN_CH, HEIGHT // 2 + 3, WIDTH - 5)]]
