"""Materialised 2D transpose: out = x^T as a new contiguous tensor (fp32)."""

import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["transpose", "data-movement", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"ROWS": 100, "COLS": 72},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 3, COLS // 4 + 1)]]
