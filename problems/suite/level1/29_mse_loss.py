"""Per-row mean squared error between predictions and targets (fp32)."""

import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["loss", "mse", "reduction", "memory-bound"],
    "flops": 0,
    "bytes": 536903680,
    "small": {"ROWS": 64, "COLS": 1000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return ((predictions - targets) ** 2).mean(dim=-1)


def get_inputs():
    # per-row scales make the per-row losses differ, so no single constant is close to all of them
    scale = torch.rand(ROWS, 1) * 2 + 0.1
    return [torch.randn(ROWS, COLS) * scale, torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def get_extra_inputs():
    rows, cols = ROWS // 4 + 1, COLS // 2 + 3
    return [[torch.randn(rows, cols) * (torch.rand(rows, 1) * 2 + 0.1), torch.randn(rows, cols)]]
