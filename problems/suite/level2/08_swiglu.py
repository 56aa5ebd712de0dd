"""SwiGLU gate of a LLaMA-style MLP: silu(x W_gate^T) * (x W_up^T) (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2048
HIDDEN = 2048
INTERMEDIATE = 5632

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "swiglu", "activation", "fusion"],
    "flops": 94489280512,
    "bytes": 155189248,
    "small": {"BATCH": 64, "HIDDEN": 48, "INTERMEDIATE": 80},
}


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


def get_inputs():
    return [torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 7, HIDDEN)]]
