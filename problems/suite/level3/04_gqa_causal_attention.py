"""Causal grouped-query attention layer (16 query heads share 4 key/value heads) with projections (fp32).

flops (hand): projections 2 * T * D * (2 * D + 2 * KV_HEADS * Dh) with T = B * S, plus causal
attention 4 * B * H * Dh * S * (S + 1) / 2 (the FLOP counter counts the full S x S products).
"""

import torch
import torch.nn as nn

BATCH = 2
SEQ = 2048
HIDDEN = 2048
HEADS = 16
KV_HEADS = 4

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["attention", "causal", "gqa", "matmul", "softmax"],
    "flops": 120275861504,
    "flops_method": "hand",
    "bytes": 109051904,
    "small": {"BATCH": 2, "SEQ": 150, "HIDDEN": 512, "HEADS": 4, "KV_HEADS": 2},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.head_dim**0.5
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=x.device), diagonal=1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.o_proj(out)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS, KV_HEADS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 8 + 3, HIDDEN)]]
