"""Attention with a learned relative position bias (T5/Swin style): softmax(QK^T/sqrt(d) + B) V (fp32)."""

import torch
import torch.nn as nn

BATCH = 16
HEADS = 16
SEQ = 512
HEAD_DIM = 64

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["attention", "matmul", "softmax", "bias", "fusion"],
    "flops": 17179869184,
    "bytes": 150994944,
    "small": {"BATCH": 2, "HEADS": 2, "SEQ": 40, "HEAD_DIM": 16},
}


class Model(nn.Module):
    def __init__(self, heads: int, seq: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(heads, seq, seq))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / (q.shape[-1] ** 0.5) + self.bias
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [HEADS, SEQ]


def get_extra_inputs():
    shape = (BATCH // 4 + 1, HEADS, SEQ, HEAD_DIM)
    return [[torch.randn(shape), torch.randn(shape), torch.randn(shape)]]
