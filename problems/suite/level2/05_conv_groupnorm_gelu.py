"""Convolution + group norm + GELU, as in diffusion U-Net blocks (fp32, NCHW)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
IN_CH = 64
OUT_CH = 128
HEIGHT = 128
WIDTH = 128
GROUPS = 8

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "groupnorm", "activation", "fusion"],
    "flops": 38654705664,
    "bytes": 201623040,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 16, "HEIGHT": 12, "WIDTH": 10, "GROUPS": 4},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_ch)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH, GROUPS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, IN_CH, HEIGHT // 2 + 1, WIDTH // 2 + 3)]]
