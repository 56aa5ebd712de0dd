"""Linear layer followed by a log-sum-exp over the output features, one value per row (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 8192

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "logsumexp", "reduction", "fusion"],
    "flops": 137438953472,
    "bytes": 100712448,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "OUT_FEATURES": 200},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=-1)


def get_inputs():
    # per-row scales spread the results; with unit rows every row would give nearly the same value
    return [torch.randn(BATCH, IN_FEATURES) * (torch.rand(BATCH, 1) * 8)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def get_extra_inputs():
    rows = BATCH // 4 + 3
    return [[torch.randn(rows, IN_FEATURES) * (torch.rand(rows, 1) * 8)]]
