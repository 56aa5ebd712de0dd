"""Matrix multiplication with a transposed left operand: C = A^T @ B, A stored K x M (fp32)."""

import torch
import torch.nn as nn

K = 4096
M = 3072
N = 2048

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# atol: with randn operands the outputs reach |c| ~ sqrt(K) and a correct fp32 product is off by up to
# ~1e-4 near c = 0 (measured against fp64: `python -m problems.update_meta --numerics`), so 1e-4 would
# fail correct kernels; 1e-3 still fails TF32 or bf16 arithmetic by an order of magnitude.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["matmul", "transposed"],
    "flops": 51539607552,
    "atol": 1e-3,
    "bytes": 109051904,
    "small": {"K": 96, "M": 64, "N": 48},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a.T, b)


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(K - 7, M // 2 + 1), torch.randn(K - 7, N + 3)]]
