"""LLaMA-3-8B-sized SwiGLU MLP: down(silu(gate(x)) * up(x)), hidden 4096, intermediate 14336 (bf16)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
HIDDEN = 4096
INTERMEDIATE = 14336

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["mlp", "swiglu", "matmul"],
    "flops": 1443109011456,
    "bytes": 419430400,
    "small": {"TOKENS": 64, "HIDDEN": 48, "INTERMEDIATE": 112},
}


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False, dtype=torch.bfloat16)
        self.up = nn.Linear(hidden, intermediate, bias=False, dtype=torch.bfloat16)
        self.down = nn.Linear(intermediate, hidden, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE]


def get_extra_inputs():
    return [[torch.randn(TOKENS // 8 + 3, HIDDEN, dtype=torch.bfloat16)]]
