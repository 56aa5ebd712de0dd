"""Tall-skinny matrix multiplication: many rows, short reduction, narrow output (fp32)."""

import torch
import torch.nn as nn

M = 32768
K = 1024
N = 512

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# atol: with randn operands the outputs reach |c| ~ sqrt(K) and a correct fp32 product is off by up to
# ~1e-4 near c = 0 (measured against fp64: `python -m problems.update_meta --numerics`), so 1e-4 would
# fail correct kernels; 1e-3 still fails TF32 or bf16 arithmetic by an order of magnitude.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["matmul", "tall-skinny"],
    "flops": 34359738368,
    "atol": 1e-3,
    "bytes": 203423744,
    "small": {"M": 256, "K": 48, "N": 32},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(M // 3 + 1, K + 3), torch.randn(K + 3, N - 1)]]
