"""Three-layer MLP with ReLU activations (fp32)."""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
HIDDEN = 4096
OUT_FEATURES = 1024

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level3",
    "dtype": "float32",
    "tags": ["mlp", "matmul", "activation"],
    "flops": 240518168576,
    "bytes": 167809024,
    "small": {"BATCH": 64, "IN_FEATURES": 48, "HIDDEN": 96, "OUT_FEATURES": 40},
}


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]


def get_extra_inputs():
    return [[torch.randn(BATCH // 8 + 3, IN_FEATURES)]]
