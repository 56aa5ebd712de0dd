"""GEGLU: one Linear to 2F features, split, gelu(a) * b (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
HIDDEN = 2048
INTERMEDIATE = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "geglu", "activation", "fusion"],
    "flops": 137438953472,
    "bytes": 167804928,
    "small": {"BATCH": 64, "HIDDEN": 48, "INTERMEDIATE": 80},
}


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.proj = nn.Linear(hidden, 2 * intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.proj(x).chunk(2, dim=-1)
        return F.gelu(a) * b


def get_inputs():
    return [torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 3, HIDDEN)]]
