"""Batched matrix multiplication C[b] = A[b] @ B[b] (fp32)."""

import torch
import torch.nn as nn

BATCH = 32
M = 1024
K = 1024
N = 1024

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# atol: with randn operands the outputs reach |c| ~ sqrt(K) and a correct fp32 product is off by up to
# ~1e-4 near c = 0 (measured against fp64: `python -m problems.update_meta --numerics`), so 1e-4 would
# fail correct kernels; 1e-3 still fails TF32 or bf16 arithmetic by an order of magnitude.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["matmul", "batched"],
    "flops": 68719476736,
    "atol": 1e-3,
    "bytes": 402653184,
    "small": {"BATCH": 3, "M": 64, "K": 48, "N": 80},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(BATCH // 2 + 1, M - 3, K + 5), torch.randn(BATCH // 2 + 1, K + 5, N // 2 + 1)]]
