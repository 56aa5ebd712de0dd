"""Rotary position embedding applied to queries and keys (rotate-half form, HF layout (B, H, S, D), bf16).

Computed in fp32 and rounded to bf16 once. (Rounding after every bf16 product, as an eager bf16
implementation does, is off by up to ~1.4x the bf16 tolerance where the two terms cancel.)
"""

import torch
import torch.nn as nn

BATCH = 4
HEADS = 32
KV_HEADS = 8
SEQ = 4096
HEAD_DIM = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["rope", "elementwise", "memory-bound"],
    "flops": 0,
    "bytes": 339738624,
    "small": {"BATCH": 2, "HEADS": 4, "KV_HEADS": 2, "SEQ": 24, "HEAD_DIM": 16},
}


class Model(nn.Module):
    def __init__(self, head_dim: int, max_seq: int, base: float = 500000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, t: torch.Tensor) -> torch.Tensor:
        seq, half = t.shape[-2], t.shape[-1] // 2
        tf = t.float()
        rotated = torch.cat([-tf[..., half:], tf[..., :half]], dim=-1)
        return (tf * self.cos[:seq] + rotated * self.sin[:seq]).to(t.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor):
        return self._rotate(q), self._rotate(k)


def get_inputs():
    q = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    return [q, k]


def get_init_inputs():
    return [HEAD_DIM, SEQ]


def get_extra_inputs():
    seq = SEQ // 4 + 3
    q = torch.randn(BATCH // 2 + 1, HEADS, seq, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH // 2 + 1, KV_HEADS, seq, HEAD_DIM, dtype=torch.bfloat16)
    return [[q, k]]
