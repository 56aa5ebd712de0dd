"""Leaky ReLU with negative slope 0.1, elementwise (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 16384
COLS = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["elementwise", "activation", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"ROWS": 64, "COLS": 1000},
}


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [0.1]


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 1, COLS // 4 + 3)]]
