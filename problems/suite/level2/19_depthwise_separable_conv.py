"""Depthwise separable convolution: depthwise 3x3 + pointwise 1x1 + ReLU6 (MobileNet) (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
IN_CH = 128
OUT_CH = 256
HEIGHT = 128
WIDTH = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "depthwise", "pointwise", "activation", "fusion"],
    "flops": 17783848960,
    "bytes": 402790400,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 12, "HEIGHT": 14, "WIDTH": 10},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.depthwise = nn.Conv2d(in_ch, in_ch, 3, padding=1, groups=in_ch)
        self.pointwise = nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.pointwise(self.depthwise(x)) * 4)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, IN_CH, HEIGHT // 2 + 3, WIDTH - 7)]]
