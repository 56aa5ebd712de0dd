"""2D convolution, 3x3 kernel, padding 1, with bias (fp32, NCHW)."""

import torch
import torch.nn as nn

BATCH = 16
IN_CH = 64
OUT_CH = 128
HEIGHT = 128
WIDTH = 128
KERNEL = 3

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["conv", "conv2d"],
    "flops": 38654705664,
    "bytes": 201622016,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 16, "HEIGHT": 16, "WIDTH": 12},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH, KERNEL]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, IN_CH, HEIGHT // 2 + 3, WIDTH - 5)]]
