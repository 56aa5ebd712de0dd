"""Classifier tail: global average pooling over H x W, then Linear (fp32); memory-bound."""

import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 512
HEIGHT = 32
WIDTH = 32
CLASSES = 1000

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level2",
    "dtype": "float32",
    "tags": ["pooling", "reduction", "matmul", "memory-bound", "fusion"],
    "flops": 65536000,
    "bytes": 136525728,
    "small": {"BATCH": 4, "CHANNELS": 16, "HEIGHT": 6, "WIDTH": 5, "CLASSES": 10},
}


class Model(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.fc = nn.Linear(channels, classes)
        with torch.no_grad():
            self.fc.weight.mul_(8.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def get_inputs():
    # a per-(sample, channel) offset, as real feature maps have; zero-mean noise would pool to ~0
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) + torch.randn(BATCH, CHANNELS, 1, 1)]


def get_init_inputs():
    return [CHANNELS, CLASSES]


def get_extra_inputs():
    batch = BATCH // 4 + 1
    return [[torch.randn(batch, CHANNELS, HEIGHT // 2 + 1, WIDTH - 3) + torch.randn(batch, CHANNELS, 1, 1)]]
