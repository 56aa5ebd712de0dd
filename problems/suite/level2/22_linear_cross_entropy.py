"""Language-model head + loss: Linear to the vocabulary, then per-token cross-entropy (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 2048
HIDDEN = 1024
VOCAB = 32000

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "cross-entropy", "loss", "fusion"],
    "flops": 134217728000,
    "bytes": 139485184,
    "small": {"TOKENS": 64, "HIDDEN": 48, "VOCAB": 500},
}


class Model(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.head = nn.Linear(hidden, vocab, bias=False)
        with torch.no_grad():
            self.head.weight.mul_(4.0)

    def forward(self, hidden_states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(hidden_states), targets, reduction="none")


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return [HIDDEN, VOCAB]


def get_extra_inputs():
    tokens = TOKENS // 4 + 3
    return [[torch.randn(tokens, HIDDEN), torch.randint(0, VOCAB, (tokens,))]]
