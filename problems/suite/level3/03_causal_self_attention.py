"""Causal multi-head self-attention layer with QKV and output projections (fp32).

flops (hand): projections 2 * T * 4 * D^2 with T = B * S, plus causal attention
4 * B * H * Dh * S * (S + 1) / 2 (the FLOP counter counts the full S x S products).
"""

import torch
import torch.nn as nn

BATCH = 4
SEQ = 2048
HIDDEN = 1024
HEADS = 16

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["attention", "causal", "mha", "matmul", "softmax"],
    "flops": 103095992320,
    "flops_method": "hand",
    "bytes": 83902464,
    "small": {"BATCH": 2, "SEQ": 150, "HIDDEN": 64, "HEADS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.o_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        head_dim = hidden // self.heads

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / head_dim**0.5
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=x.device), diagonal=1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.o_proj(out)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 8 + 5, HIDDEN)]]
