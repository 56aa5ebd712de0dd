"""Softmax over the last dimension of a (rows, columns) matrix (fp32)."""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 16384

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["softmax", "reduction", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"ROWS": 16, "COLS": 5000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    # scaled so that rows have a few dominant entries, as attention logits do
    return [torch.randn(ROWS, COLS) * 4]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 2 + 1, COLS // 4 + 3) * 4], [torch.randn(ROWS, 77) * 4]]
