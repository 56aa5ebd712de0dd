"""Gated 1D convolution: Conv1d to 2C channels, then GLU over channels (fp32, NCL)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
CHANNELS = 256
LENGTH = 4096
KERNEL = 3

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["conv", "conv1d", "glu", "fusion"],
    "flops": 51539607552,
    "bytes": 135792640,
    "small": {"BATCH": 2, "CHANNELS": 16, "LENGTH": 100},
}


class Model(nn.Module):
    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, 2 * channels, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.glu(self.conv(x), dim=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [CHANNELS, KERNEL]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, LENGTH // 4 + 9)]]
