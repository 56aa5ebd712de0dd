"""Mean over the first dimension (a column reduction, strided access) (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["reduction", "memory-bound"],
    "flops": 0,
    "bytes": 268451840,
    "small": {"ROWS": 300, "COLS": 64},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 4 + 1]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 4 + 3, COLS + 5) * 4 + 1]]
