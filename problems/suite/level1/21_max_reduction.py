"""Maximum over the middle dimension of a (batch, length, features) tensor (fp32)."""

import torch
import torch.nn as nn

BATCH = 128
LENGTH = 4096
FEATURES = 128

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["reduction", "memory-bound"],
    "flops": 0,
    "bytes": 268500992,
    "small": {"BATCH": 4, "LENGTH": 300, "FEATURES": 24},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, LENGTH, FEATURES)]


def get_init_inputs():
    return []


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 1, LENGTH // 2 + 3, FEATURES - 5)]]
