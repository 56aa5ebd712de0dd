"""Sum over the last dimension of a (rows, columns) matrix (fp32)."""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 16384

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["reduction", "memory-bound"],
    "flops": 0,
    "bytes": 268451840,
    "small": {"ROWS": 64, "COLS": 1000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) + 0.25]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 1, COLS // 8 + 5) + 0.25]]
