"""Batch normalisation in eval mode (running statistics, learned affine) of an NCHW activation (fp32)."""

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
    "tags": ["normalization", "batchnorm", "memory-bound"],
    "flops": 0,
    "bytes": 536872968,
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 12, "WIDTH": 10},
}


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels, eps=1e-5)
        with torch.no_grad():  # statistics as after training: the op is not the identity
            self.norm.running_mean.normal_(0.0, 1.0)
            self.norm.running_var.uniform_(0.5, 2.0)
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.5)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


def get_extra_inputs():
    return [[torch.randn(BATCH // 4 + 1, CHANNELS, HEIGHT // 2 + 3, WIDTH - 1)]]
