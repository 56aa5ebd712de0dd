"""Fused residual add + RMSNorm in bf16, returning (normalised, new residual) as LLM decoder layers do."""

import torch
import torch.nn as nn

TOKENS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["rmsnorm", "residual", "normalization", "memory-bound"],
    "flops": 0,
    "bytes": 536879104,
    "small": {"TOKENS": 16, "HIDDEN": 4500},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((torch.rand(hidden) + 0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        hf = h.float()
        normed = (hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + self.eps)).to(h.dtype)
        return self.weight * normed, h


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16), torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    t = TOKENS // 8 + 3
    return [[torch.randn(t, HIDDEN, dtype=torch.bfloat16), torch.randn(t, HIDDEN, dtype=torch.bfloat16)]]
