"""Transformer output epilogue: LayerNorm(x + bias + residual) (fp32); memory-bound."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["residual", "layernorm", "memory-bound", "fusion"],
    "flops": 0,
    "bytes": 805355520,
    "small": {"ROWS": 16, "HIDDEN": 2500},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.5)
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)
        self.norm_bias = nn.Parameter(torch.randn(hidden) * 0.2)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + self.bias + residual
        return F.layer_norm(h, h.shape[-1:], self.weight, self.norm_bias, eps=1e-5)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN), torch.randn(ROWS, HIDDEN) * 2]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    return [[torch.randn(ROWS // 8 + 3, HIDDEN), torch.randn(ROWS // 8 + 3, HIDDEN) * 2]]
