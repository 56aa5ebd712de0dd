"""Layout change NCHW -> NHWC (permute and materialise) (fp32)."""

import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 128
WIDTH = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["permute", "data-movement", "memory-bound"],
    "flops": 0,
    "bytes": 536870912,
    "small": {"BATCH": 2, "CHANNELS": 12, "HEIGHT": 10, "WIDTH": 9},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).contiguous()


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS - 5, HEIGHT // 2 + 3, WIDTH - 1)]]
