"""1D convolution, kernel 5, padding 2, with bias (fp32, NCL)."""

import torch
import torch.nn as nn

BATCH = 32
IN_CH = 64
OUT_CH = 128
LENGTH = 16384
KERNEL = 5

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["conv", "conv1d"],
    "flops": 42949672960,
    "bytes": 402817536,
    "small": {"BATCH": 2, "IN_CH": 8, "OUT_CH": 16, "LENGTH": 200},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, LENGTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH, KERNEL]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, IN_CH, LENGTH // 3 + 7)]]
