"""Post-norm residual block: LayerNorm(x + Linear(x)) (fp32)."""

import torch
import torch.nn as nn

BATCH = 8192
FEATURES = 2048

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "residual", "layernorm", "fusion"],
    "flops": 68719476736,
    "bytes": 151019520,
    "small": {"BATCH": 64, "FEATURES": 96},
}


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 1, FEATURES)]]
