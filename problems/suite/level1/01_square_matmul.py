"""Square matrix multiplication C = A @ B in fp32 (TF32 off)."""

import torch
import torch.nn as nn

N = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
# atol: with randn operands the outputs reach |c| ~ sqrt(K) and a correct fp32 product is off by up to
# ~1e-4 near c = 0 (measured against fp64: `python -m problems.update_meta --numerics`), so 1e-4 would
# fail correct kernels; 1e-3 still fails TF32 or bf16 arithmetic by an order of magnitude.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["matmul"],
    "flops": 137438953472,
    "atol": 1e-3,
    "bytes": 201326592,
    "small": {"N": 96},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []


def get_extra_inputs():
    # non-square, not a multiple of any block size
    return [[torch.randn(N // 2 + 3, N - 5), torch.randn(N - 5, N // 4 + 7)]]
