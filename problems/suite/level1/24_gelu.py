"""GELU activation (exact, erf form), elementwise (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 8192

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
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 1, COLS // 4 + 3) * 2], [torch.randn(5, 3, 17, 11) * 2]]
