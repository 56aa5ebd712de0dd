"""Per-token cross-entropy over a 128K vocabulary from bf16 logits, computed in fp32.

atol/rtol 1e-3: the loss is computed in fp32 from exact bf16 inputs, so the bf16 default (1e-2,
about 0.1 nats at these magnitudes) would let a bf16-accumulating shortcut pass.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
VOCAB = 128256

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["cross-entropy", "loss", "softmax", "large-vocab", "memory-bound"],
    "flops": 0,
    "bytes": 1050722304,
    "atol": 1e-3,
    "rtol": 1e-3,
    "small": {"TOKENS": 16, "VOCAB": 9000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), targets, reduction="none")


def get_inputs():
    return [torch.randn(TOKENS, VOCAB, dtype=torch.bfloat16) * 3, torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return []


def get_extra_inputs():
    tokens, vocab = TOKENS // 8 + 3, VOCAB // 4 + 1
    return [[torch.randn(tokens, vocab, dtype=torch.bfloat16) * 3, torch.randint(0, vocab, (tokens,))]]
