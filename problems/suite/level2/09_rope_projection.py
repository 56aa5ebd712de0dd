"""Query projection followed by rotary position embedding (rotate-half form), output (B, H, S, D) (fp32)."""

import torch
import torch.nn as nn

BATCH = 4
SEQ = 2048
HIDDEN = 2048
HEADS = 16
MAX_SEQ = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "rope", "layout", "fusion"],
    "flops": 68719476736,
    "bytes": 155189248,
    "small": {"BATCH": 2, "SEQ": 24, "HIDDEN": 64, "HEADS": 4, "MAX_SEQ": 64},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int, max_seq: int, base: float = 10000.0):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        angles = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:seq], self.sin[:seq]
        half = self.head_dim // 2
        rotated = torch.cat([-q[..., half:], q[..., :half]], dim=-1)
        return q * cos + rotated * sin


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS, MAX_SEQ]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 2 + 5, HIDDEN)]]
