"""Layer normalisation over the last dimension with a learned affine transform (fp32)."""

import torch
import torch.nn as nn

ROWS = 16384
HIDDEN = 4096

# "flops" and "bytes" are computed by `python -m problems.update_meta --write` (see problems/update_meta.py).
META = {
    "level": "level1",
    "dtype": "float32",
    "tags": ["normalization", "layernorm", "memory-bound"],
    "flops": 0,
    "bytes": 536903680,
    "small": {"ROWS": 64, "HIDDEN": 320},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():  # non-trivial affine parameters, so ignoring them is caught
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN) * 2 + 0.5]


def get_init_inputs():
    return [HIDDEN]


def get_extra_inputs():
    return [[torch.randn(ROWS // 4 + 3, HIDDEN) * 2 + 0.5], [torch.randn(3, 7, HIDDEN)]]
