"""Group normalisation of an NCHW activation, 16 groups, learned affine (fp32)."""

import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 128
WIDTH = 128
GROUPS = 16

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["normalization", "groupnorm", "memory-bound"],
    "flops": 0,
    "bytes": 536871936,
    "small": {"BATCH": 2, "CHANNELS": 32, "HEIGHT": 12, "WIDTH": 10, "GROUPS": 4},
}


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 2 + 1]


def get_init_inputs():
    return [GROUPS, CHANNELS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, HEIGHT // 2 + 1, WIDTH - 3) * 2 + 1]]
