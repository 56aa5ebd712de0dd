"""Inclusive prefix sum along the last dimension (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# atol: a correct fp32 scan of 4096 values is off by up to 4.4e-4 (sequential order) or 6.5e-5
# (blocks of 128) where a prefix sum passes near zero, measured against an fp64 scan of randn rows;
# 1e-4 would fail the sequential one, while 1e-3 still catches any real error (partial sums ~64).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["scan", "cumsum", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "atol": 1e-3,
    "small": {"ROWS": 64, "COLS": 1000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 4 + 1, COLS // 2 + 3)]]
