"""Linear layer (GEMM + bias) followed by ReLU (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 4096
OUT_FEATURES = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "bias", "activation", "fusion"],
    "flops": 137438953472,
    "bytes": 201342976,
    "small": {"BATCH": 64, "IN_FEATURES": 96, "OUT_FEATURES": 80},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 3, IN_FEATURES)], [torch.randn(2, 33, IN_FEATURES)]]
