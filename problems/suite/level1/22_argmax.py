"""Index of the maximum over the last dimension (int64 output)."""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 16384

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["reduction", "argmax", "memory-bound"],
    "flops": 0,
    "bytes": 268468224,
    "small": {"ROWS": 64, "COLS": 1000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 3, COLS // 16 + 1)]]
