"""Matrix multiplication with a transposed right operand: C = A @ B^T, B stored N x K (fp32)."""

import torch
import torch.nn as nn

M = 4096
N = 3072
K = 2048

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
    "small": {"M": 80, "N": 64, "K": 96},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(M // 4 + 3, K + 1), torch.randn(N - 9, K + 1)]]
