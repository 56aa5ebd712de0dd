"""Fused QKV projection and head split: Linear to 3D, then layout (3, B, H, S, D) (fp32)."""

import torch
import torch.nn as nn

BATCH = 4
SEQ = 2048
HIDDEN = 2048
HEADS = 16

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "layout", "attention", "fusion"],
    "flops": 206158430208,
    "bytes": 318791680,
    "small": {"BATCH": 2, "SEQ": 24, "HIDDEN": 64, "HEADS": 4},
}


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, hidden // self.heads)
        return qkv.permute(2, 0, 3, 1, 4).contiguous()


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, SEQ // 4 + 3, HIDDEN)]]
