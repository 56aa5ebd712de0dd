"""Transposed 2D convolution, kernel 4, stride 2, padding 1: doubles H and W (fp32)."""

import torch
import torch.nn as nn

BATCH = 16
IN_CH = 128
OUT_CH = 64
HEIGHT = 64
WIDTH = 64

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["conv", "conv-transpose", "upsample"],
    "flops": 17179869184,
    "bytes": 101187840,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 6, "HEIGHT": 10, "WIDTH": 12},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_ch, out_ch, kernel_size=4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, IN_CH, HEIGHT // 2 + 1, WIDTH - 3)]]
