"""Upsampling stage: transposed convolution (stride 2) + bias + SiLU (fp32, NCHW)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
IN_CH = 128
OUT_CH = 64
HEIGHT = 64
WIDTH = 64

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "conv-transpose", "activation", "fusion"],
    "flops": 17179869184,
    "bytes": 101187840,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 6, "HEIGHT": 10, "WIDTH": 8},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_ch, out_ch, kernel_size=4, stride=2, padding=1, bias=False)
        self.bias = nn.Parameter(torch.randn(out_ch, 1, 1) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.deconv(x) + self.bias)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, IN_CH, HEIGHT // 2 + 1, WIDTH // 2 + 3)]]
