"""Up-projection of a transformer MLP: Linear followed by tanh-approximated GELU (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "bias", "activation", "gelu", "fusion"],
    "flops": 137438953472,
    "bytes": 234913792,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "OUT_FEATURES": 160},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 5, IN_FEATURES)]]
