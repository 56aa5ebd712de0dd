"""Classifier head: Linear to many classes, then softmax probabilities (fp32)."""

import torch
import torch.nn as nn

BATCH = 2048
IN_FEATURES = 2048
CLASSES = 16384

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["matmul", "softmax", "fusion"],
    "flops": 137438953472,
    "bytes": 285278208,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "CLASSES": 300},
}


class Model(nn.Module):
    def __init__(self, in_features: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(in_features, classes)
        with torch.no_grad():  # logits with a spread like a trained classifier's, not nearly uniform
            self.linear.weight.mul_(8.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=-1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, CLASSES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 5, IN_FEATURES)]]
