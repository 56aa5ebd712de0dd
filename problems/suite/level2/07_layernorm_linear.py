"""Pre-norm projection: LayerNorm then Linear (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["layernorm", "matmul", "fusion"],
    "flops": 137438953472,
    "bytes": 234930176,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "OUT_FEATURES": 96},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.norm = nn.LayerNorm(in_features)
        self.linear = nn.Linear(in_features, out_features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES) * 2 + 1]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 3, IN_FEATURES) * 2 + 1]]
