"""2D average pooling, kernel 3, stride 1, padding 1 (a box blur; padding counts as zeros) (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
CHANNELS = 64
HEIGHT = 256
WIDTH = 256

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["pooling", "memory-bound"],
    "flops": 0,
    "bytes": 1073741824,
    "small": {"BATCH": 2, "CHANNELS": 4, "HEIGHT": 24, "WIDTH": 18},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS + 3, HEIGHT // 2 - 1, WIDTH // 3 + 2)]]
