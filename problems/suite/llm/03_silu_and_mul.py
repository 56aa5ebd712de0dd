"""SwiGLU activation on a fused gate/up projection output: silu(x[:, :F]) * x[:, F:] (bf16)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
INTERMEDIATE = 14336

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["swiglu", "activation", "elementwise", "memory-bound"],
    "flops": 0,
    "bytes": 704643072,
    "small": {"TOKENS": 16, "INTERMEDIATE": 1100},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(TOKENS, 2 * INTERMEDIATE, dtype=torch.bfloat16) * 2]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(TOKENS // 8 + 5, INTERMEDIATE + 6, dtype=torch.bfloat16) * 2]]
