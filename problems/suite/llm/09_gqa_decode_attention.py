"""Decode-step grouped-query attention: one query token per sequence against a 4096-token KV cache (bf16).

Memory-bound: the whole KV cache is read once per step.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
HEADS = 32
KV_HEADS = 8
CACHE = 4096
HEAD_DIM = 128

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, 4 * BATCH * HEADS * CACHE * HEAD_DIM (q.K^T and p.V), as the FLOP counter
# does not count the CPU attention kernel.
META = {
    "level": "llm",
    "dtype": "bfloat16",
    "tags": ["attention", "decode", "gqa", "kv-cache", "memory-bound"],
    "flops": 2147483648,
    "flops_method": "hand",
    "bytes": 537395200,
    "small": {"BATCH": 2, "HEADS": 4, "KV_HEADS": 2, "CACHE": 300, "HEAD_DIM": 16},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q.unsqueeze(2), k_cache, v_cache, enable_gqa=True)
        return out.squeeze(2)


def _inputs(batch: int, cache: int):
    # queries scaled by 3 give peaked attention, so outputs are not averages near zero
    q = torch.randn(batch, HEADS, HEAD_DIM, dtype=torch.bfloat16) * 3
    k = torch.randn(batch, KV_HEADS, cache, HEAD_DIM, dtype=torch.bfloat16)
    v = torch.randn(batch, KV_HEADS, cache, HEAD_DIM, dtype=torch.bfloat16)
    return [q, k, v]


def get_inputs():
    return _inputs(BATCH, CACHE)


def get_init_inputs():
    return []


def get_extra_inputs():
    return [_inputs(BATCH // 4 + 1, CACHE // 4 + 7)]
