"""RMS normalisation over the last dimension with a learned scale (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["normalization", "rmsnorm", "memory-bound"],
    "flops": 0,
    "bytes": 536887296,
    "small": {"ROWS": 16, "HIDDEN": 4500},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    return [[torch.randn(ROWS // 4 + 3, HIDDEN)], [torch.randn(2, 5, HIDDEN)]]
