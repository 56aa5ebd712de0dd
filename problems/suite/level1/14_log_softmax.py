"""Log-softmax over the last dimension (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["softmax", "reduction", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"ROWS": 100, "COLS": 300},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(ROWS // 8 + 1, COLS * 2 + 1) * 3]]
