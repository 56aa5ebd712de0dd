"""SiLU (swish) activation x * sigmoid(x), elementwise on a 4D tensor (fp32)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
CHANNELS = 256
HEIGHT = 64
WIDTH = 64

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["elementwise", "activation", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 12, "WIDTH": 10},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 3]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS - 3, HEIGHT // 2 + 1, WIDTH - 1) * 3]]
