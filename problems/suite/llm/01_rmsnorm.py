"""LLaMA RMSNorm in bf16: statistics in fp32, normalised value rounded to bf16, then scaled."""

import torch
import torch.nn as nn

TOKENS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["rmsnorm", "normalization", "memory-bound"],
    "flops": 0,
    "bytes": 268443648,
    "small": {"TOKENS": 16, "HIDDEN": 4500},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((torch.rand(hidden) + 0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    return [[torch.randn(TOKENS // 8 + 3, HIDDEN, dtype=torch.bfloat16)], [torch.randn(2, 7, HIDDEN, dtype=torch.bfloat16)]]
