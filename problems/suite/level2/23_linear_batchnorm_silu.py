"""MLP-head stage: Linear + BatchNorm1d (eval mode) + SiLU (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
IN_FEATURES = 2048
OUT_FEATURES = 2048

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "batchnorm", "activation", "fusion"],
    "flops": 68719476736,
    "bytes": 151035912,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "OUT_FEATURES": 80},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        with torch.no_grad():
            self.bn.running_mean.normal_(0.0, 0.2)
            self.bn.running_var.uniform_(0.1, 0.5)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.normal_(0.0, 0.2)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.bn(self.linear(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 1, IN_FEATURES)]]
