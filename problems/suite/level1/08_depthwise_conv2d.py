"""Depthwise 2D convolution (groups = channels), 3x3, padding 1 (fp32); memory-bound."""

import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 128
WIDTH = 128
KERNEL = 3

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["conv", "depthwise", "memory-bound"],
    "flops": 1207959552,
    "bytes": 536876032,
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 20, "WIDTH": 16},
}


class Model(nn.Module):
    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, KERNEL]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, HEIGHT - 3, WIDTH // 2 + 1)]]
