"""Fused residual add + RMSNorm, returning (normalised, new residual) as LLM decoders do (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["residual", "rmsnorm", "memory-bound", "fusion"],
    "flops": 0,
    "bytes": 1073758208,
    "small": {"ROWS": 16, "HIDDEN": 4500},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        normed = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        return normed, h


def get_inputs():
    return [torch.randn(ROWS, HIDDEN), torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    return [[torch.randn(ROWS // 8 + 3, HIDDEN), torch.randn(ROWS // 8 + 3, HIDDEN)]]
