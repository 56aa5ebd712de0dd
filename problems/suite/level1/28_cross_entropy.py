"""Per-sample cross-entropy loss of logits against integer class targets (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4096
CLASSES = 32000

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["loss", "cross-entropy", "softmax", "memory-bound"],
    "flops": 0,
    "bytes": 524337152,
    "small": {"BATCH": 16, "CLASSES": 5000},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # one loss per sample: a mean over the batch would be a near-constant scalar
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    return [torch.randn(BATCH, CLASSES) * 3, torch.randint(0, CLASSES, (BATCH,))]


def get_init_inputs():
    return []


def get_extra_inputs():
    classes = CLASSES // 2 + 3
    return [[torch.randn(BATCH // 4 + 1, classes) * 3, torch.randint(0, classes, (BATCH // 4 + 1,))]]
