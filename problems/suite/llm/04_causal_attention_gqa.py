"""Causal grouped-query attention prefill: 32 query heads over 8 key/value heads, head dim 128 (bf16).

flops (hand): 4 * B * H * D * S * (S + 1) / 2, the lower triangles of Q K^T and P V (the FLOP
counter does not count the CPU attention kernel, and would count the full S x S products).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
HEADS = 32
KV_HEADS = 8
SEQ = 2048
HEAD_DIM = 128

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, see the docstring.
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["attention", "causal", "gqa", "flash-attention"],
    "flops": 137506062336,
    "flops_method": "hand",
    "bytes": 167772160,
    "small": {"BATCH": 1, "HEADS": 4, "KV_HEADS": 2, "SEQ": 300, "HEAD_DIM": 16},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _qkv(batch: int, seq: int):
    # queries scaled by 2 give peaked attention rows (as trained models have), so outputs are not
    # averages of thousands of values that all sit near zero
    q = torch.randn(batch, HEADS, seq, HEAD_DIM, dtype=torch.bfloat16) * 2
    k = torch.randn(batch, KV_HEADS, seq, HEAD_DIM, dtype=torch.bfloat16)
    v = torch.randn(batch, KV_HEADS, seq, HEAD_DIM, dtype=torch.bfloat16)
    return [q, k, v]


def get_inputs():
    return _qkv(BATCH, SEQ)


def get_init_inputs():
    return []


def get_extra_inputs():
    return [_qkv(BATCH // 2 + 1, SEQ // 4 + 5)]
