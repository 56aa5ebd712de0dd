"""Matrix-vector product y = A @ x (fp32); bound by reading A once."""

import torch
import torch.nn as nn

M = 16384
K = 8192

# "bytes" is computed by `python -m problems.update_meta --write` (see problems/update_meta.py);
# "flops" by hand, 2 * M * K, because torch.utils.flop_counter does not count torch.mv.
# atol: with randn operands the outputs reach |c| ~ sqrt(K) and a correct fp32 product is off by up to
# ~1e-4 near c = 0 (measured against fp64: `python -m problems.update_meta --numerics`), so 1e-4 would
# fail correct kernels; 1e-3 still fails TF32 or bf16 arithmetic by an order of magnitude.
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["matmul", "gemv", "memory-bound"],
    "flops": 268435456,
    "flops_method": "hand",
    "atol": 1e-3,
    "bytes": 536969216,
    "small": {"M": 256, "K": 192},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.mv(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(M // 2 + 5, K - 3), torch.randn(K - 3)]]
