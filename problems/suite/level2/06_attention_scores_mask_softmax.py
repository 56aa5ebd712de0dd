"""Causal attention probabilities: softmax(mask(Q K^T / sqrt(d))), returned in full (fp32).

flops: only the lower triangle of Q K^T is needed, so the minimum is 2 * B * H * D * S * (S + 1) / 2
(hand-counted; the FLOP counter counts the full S x S product).
"""

import torch
import torch.nn as nn

BATCH = 8
HEADS = 16
SEQ = 1024
HEAD_DIM = 64

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["attention", "matmul", "softmax", "mask", "fusion"],
    "flops": 8598323200,
    "flops_method": "hand",
    "bytes": 603979776,
    "small": {"BATCH": 2, "HEADS": 2, "SEQ": 150, "HEAD_DIM": 16},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM), torch.randn(BATCH, HEADS, SEQ, HEAD_DIM)]


def get_init_inputs():
    return []


def get_extra_inputs():
    shape = (BATCH // 4 + 1, HEADS, SEQ // 4 + 3, HEAD_DIM)
    return [[torch.randn(shape), torch.randn(shape)]]
