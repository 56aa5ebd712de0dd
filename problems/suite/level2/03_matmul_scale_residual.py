"""Scaled residual branch: y = x + alpha * (x @ W^T) (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
FEATURES = 4096
ALPHA = 0.5

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "residual", "fusion"],
    "flops": 137438953472,
    "bytes": 201326592,
    "small": {"BATCH": 64, "FEATURES": 96},
}


class Model(nn.Module):
    def __init__(self, features: int, alpha: float):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=False)
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.alpha * self.linear(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES, ALPHA]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, FEATURES)]]
