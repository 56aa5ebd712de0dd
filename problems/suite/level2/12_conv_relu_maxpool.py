"""Convolution + ReLU + 2x2 max pooling, a VGG-style stage (fp32, NCHW)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
IN_CH = 64
OUT_CH = 128
HEIGHT = 128
WIDTH = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "activation", "pooling", "fusion"],
    "flops": 38654705664,
    "bytes": 100958720,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 16, "HEIGHT": 14, "WIDTH": 12},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(self.conv(x)), kernel_size=2, stride=2)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, IN_CH, HEIGHT // 2 + 2, WIDTH // 2 + 6)]]
